"""The dashboard chat: a prompt typed on a session page runs an agent in the ASGI process.

``turns`` keeps the turn's row (one running turn per session, its state, what is in flight),
``agent`` builds the agent (the session's chat model, the repository tools, the hub's
governance before every model request), ``stream`` pushes what happens to every open tab,
``runner`` runs a turn as an asyncio task and stops it, and ``commands`` answers the slash
commands typed in the chat through the same services as the buttons.
"""
