from __future__ import annotations

from django.urls import path, register_converter

from gateway import pages as gateway_pages
from sessions import controls, views
from sessions.api import pages as api_pages
from sessions.chat import views as chat


class SeqConverter:
    """A seq or a record id: digits that fit the database's integer columns (a longer number
    is a 404, not a database error)."""

    regex = "[0-9]{1,9}"

    def to_python(self, value: str) -> int:
        return int(value)

    def to_url(self, value: int) -> str:
        return str(value)


register_converter(SeqConverter, "seq")

app_name = "sessions"

urlpatterns = [
    path("", views.session_list, name="list"),
    path("sessions/<uuid:pk>/", views.session_detail, name="detail"),
    path("chats/new/", chat.new_chat, name="new-chat"),
    path("keys/", api_pages.keys, name="keys"),
    path("keys/new/", api_pages.create, name="key-create"),
    path("keys/<seq:pk>/revoke/", api_pages.revoke_key, name="key-revoke"),
    # The gateway's provider keys: pages, so not under /gateway/ (no middleware runs there).
    path("keys/provider/<str:provider>/", gateway_pages.store, name="provider-key-store"),
    path(
        "keys/provider/<str:provider>/delete/",
        gateway_pages.delete,
        name="provider-key-delete",
    ),
    path("sessions/<uuid:pk>/gateway/mode/", gateway_pages.session_mode, name="gateway-mode"),
    path("sessions/<uuid:pk>/chat/", chat.send, name="chat-send"),
    path("sessions/<uuid:pk>/chat/stop/", chat.stop, name="chat-stop"),
    path("sessions/<uuid:pk>/chat/turn/", chat.turn, name="chat-turn"),
    path("sessions/<uuid:pk>/xray/", views.xray_fragment, name="xray"),
    path("sessions/<uuid:pk>/consumers/", views.consumers_fragment, name="consumers"),
    path("sessions/<uuid:pk>/records/", views.records_fragment, name="records"),
    path("sessions/<uuid:pk>/trajectory/", views.trajectory_fragment, name="trajectory"),
    path("sessions/<uuid:pk>/fates/", views.fates, name="fates"),
    path("sessions/<uuid:pk>/messages/", views.messages, name="messages"),
    path("sessions/<uuid:pk>/messages/<seq:seq>/", views.message_detail, name="message"),
    path("sessions/<uuid:pk>/messages/<seq:seq>/sent/", views.message_sent, name="sent"),
    path("sessions/<uuid:pk>/messages/<seq:seq>/fork/", views.fork, name="fork"),
    path("sessions/<uuid:pk>/evicted/<str:ref>/", views.evicted, name="evicted"),
    path("sessions/<uuid:pk>/requests/<seq:number>/", views.sent_request, name="sent-request"),
    path("sessions/<uuid:pk>/recount/", views.recount, name="recount"),
    path("sessions/<uuid:pk>/export/", views.export, name="export"),
    path("sessions/import/", views.import_session, name="import"),
    path("sessions/<uuid:pk>/compact/preview/", controls.compaction_preview, name="preview"),
    path("sessions/<uuid:pk>/compact/", controls.compact, name="compact"),
    path(
        "sessions/<uuid:pk>/compactions/<seq:compaction>/undo/",
        controls.undo_compaction,
        name="undo-compaction",
    ),
    path("sessions/<uuid:pk>/clear/", controls.clear, name="clear"),
    path("sessions/<uuid:pk>/clears/<seq:clear>/undo/", controls.undo_clear, name="undo-clear"),
    path("sessions/<uuid:pk>/pins/<seq:seq>/", controls.pin, name="pin"),
    path("sessions/<uuid:pk>/auto/resume/", controls.resume_auto, name="resume-auto"),
    path("sessions/<uuid:pk>/policy/", controls.policy_editor, name="policy"),
    path("sessions/<uuid:pk>/policy/preview/", controls.policy_preview, name="policy-preview"),
    path("sessions/<uuid:pk>/policy/save/", controls.policy_save, name="policy-save"),
]
