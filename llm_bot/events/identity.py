"""Who an event is from and which conversation it belongs to.

Both rules live here so that memory, history and ordering keys can never disagree on them.

- user id: ``identity.user.id`` (the platform's own user, set by the auth service) when present,
  else ``identity.external.platform + ":" + identity.external.id``.
- thread id: ``egress.connector + ":" + channel`` where channel is ``egress.channel`` or else
  ``ingress.channel``; a direct conversation appends ``":" + user id`` so two users' DMs never
  share a thread.
- direct or shared: what is learned in a direct conversation never reaches a shared channel,
  so the rule fails closed. An event is shared only when everything says so: its egress is a
  chat (``egress.type == "chat"``, as every BitBrat ingress sets it for a room), it names a
  channel, and no marker of a private conversation is present: a ``dm.*`` event type (set by
  BitBrat's ingress from the platform, and kept when a routing rule replaces the egress, e.g.
  with ``{destination, type: "discord"}``), Discord's ``channelType`` 1 or an ``isDM`` flag
  (fields BitBrat's generic ingress copies onto the event), a Slack ``D…`` channel, or a
  connector whose conversations are one-to-one (SMS through ``twilio``). A missing, replaced or
  unknown egress type is direct: a room misread as a DM loses its shared window; a DM misread
  as a room would show private memories to everyone in it.

Every part but the last is escaped (``%`` as ``%25``, ``:`` as ``%3A``) before the parts are
joined with ``:``, so an id has one reading: a public thread has exactly one unescaped colon, a
DM thread at least two (the user id, last, is kept as it is), and a channel named ``a:b`` is
never mistaken for the DM of user ``b`` in channel ``a``. Parts without ``:`` or ``%`` (every
platform name and channel id we know) need no escaping and are written as they are; migration
``0005`` rewrote the stored ids that hold either.
"""

from __future__ import annotations

from llm_bot.events.models import InternalEventV2


def user_id_of(event: InternalEventV2) -> str:
    """The stable id that scopes every memory of the sender."""
    user = event.identity.user
    if user is not None:
        return user.id
    external = event.identity.external
    return f"{escaped(external.platform)}:{external.id}"


SHARED_EGRESS_TYPE = "chat"
# Platforms whose every conversation is one person and the bot.
ONE_TO_ONE_CONNECTORS = frozenset({"twilio", "sms", "whatsapp"})
DISCORD_DM_CHANNEL_TYPE = 1


def is_direct(event: InternalEventV2) -> bool:
    """A private conversation, by the fail-closed rule of the module docstring."""
    channel = event.egress.channel or event.ingress.channel
    return (
        (event.egress.type or "").strip().lower() != SHARED_EGRESS_TYPE
        or not channel
        or event.type.lower().startswith("dm.")
        or _marked_direct(event)
        or _connector(event) in ONE_TO_ONE_CONNECTORS
        or (_connector(event) == "slack" and channel.startswith("D"))
    )


def _marked_direct(event: InternalEventV2) -> bool:
    """BitBrat's generic ingress copies platform fields onto the event (``extra`` here)."""
    extra = event.model_extra or {}
    return extra.get("channelType") == DISCORD_DM_CHANNEL_TYPE or extra.get("isDM") in (True, 1)


def _connector(event: InternalEventV2) -> str:
    return (event.ingress.connector or event.egress.connector or "").strip().lower()


def thread_id_of(event: InternalEventV2) -> str:
    """The conversation this event belongs to (see the module docstring for the rule)."""
    channel = event.egress.channel or event.ingress.channel
    base = f"{escaped(event.egress.connector or '')}:{escaped(channel or '')}"
    if is_direct(event):
        return f"{base}:{user_id_of(event)}"
    return base


def direct_user_of(thread_id: str) -> str | None:
    """The user of a direct conversation's thread (everything after the second colon, the
    parts before it being escaped); ``None`` for a shared channel's."""
    parts = thread_id.split(":", 2)
    return parts[2] if len(parts) == 3 else None


def is_shared_thread(thread_id: str) -> bool:
    """A shared channel's thread: no user of its own (:func:`direct_user_of`)."""
    return direct_user_of(thread_id) is None


def escaped(part: str) -> str:
    """``part`` with ``%`` and ``:`` percent-encoded (see the module docstring)."""
    return part.replace("%", "%25").replace(":", "%3A")
