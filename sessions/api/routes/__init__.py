"""The API's operations, a module per resource; ``sessions.api.app`` mounts them."""
