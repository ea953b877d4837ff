"""Who an event is from and which conversation it belongs to.

Both rules live here so that memory, history and ordering keys can never disagree on them.

- user id: ``identity.user.id`` (the platform's own user, set by the auth service) when present,
  else ``identity.external.platform + ":" + identity.external.id``.
- thread id: ``egress.connector + ":" + channel`` where channel is ``egress.channel`` or else
  ``ingress.channel``; a direct message (``egress.type == "dm"``) appends ``":" + user id`` so
  two users' DMs never share a thread. An event with no channel at all is treated as direct:
  without a room to share, the only safe conversation is the user's own.

Every part but the last is escaped (``%`` as ``%25``, ``:`` as ``%3A``) before the parts are
joined with ``:``, so an id has one reading: a public thread has exactly one unescaped colon, a
DM thread at least two (the user id, last, is kept as it is), and a channel named ``a:b`` can
no longer be mistaken for the DM of user ``b`` in channel ``a``. Parts without ``:`` or ``%``
(every platform name and channel id we know) read as before, so existing ids are unchanged;
migration ``0005`` rewrites the few that are not.
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


def is_direct(event: InternalEventV2) -> bool:
    """A private conversation: a direct message, or an event with no channel at all."""
    return event.egress.type == "dm" or not (event.egress.channel or event.ingress.channel)


def thread_id_of(event: InternalEventV2) -> str:
    """The conversation this event belongs to (see the module docstring for the rule)."""
    channel = event.egress.channel or event.ingress.channel
    base = f"{escaped(event.egress.connector or '')}:{escaped(channel or '')}"
    if is_direct(event):
        return f"{base}:{user_id_of(event)}"
    return base


def escaped(part: str) -> str:
    """``part`` with ``%`` and ``:`` percent-encoded (see the module docstring)."""
    return part.replace("%", "%25").replace(":", "%3A")
