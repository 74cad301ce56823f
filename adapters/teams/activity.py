"""Teams activities as plain protocol JSON -> who, where and what: ``Inbound``, thread, reference, deep link.

Pure functions over the camelCase dicts the Bot Framework protocol defines, so the same code serves
botbuilder today and the Microsoft 365 Agents SDK tomorrow (both serialize to this JSON).

Where a reply goes: in a channel, the conversation id carries the root of the reply chain as
``<channel id>;messageid=<root id>``; posting to that id lands in the thread, while a plain
``replyToId`` can start a new post. Personal and group chats have no threads: the chat is the thread.
"""

from __future__ import annotations

import html
import json
import re
from typing import Any
from urllib.parse import quote, urlencode

from adapters.teams.dedupe import event_id
from bot.delivery import Address
from bot.identity import GroupMap
from bot.types import Inbound, UserRef

Activity = dict[str, Any]

THREAD_MARKER = ";messageid="
FILE_DOWNLOAD = "application/vnd.microsoft.teams.file.download.info"  # a file shared in a chat
GUEST_ROLES = frozenset({"guest", "anonymous"})
# The HTML Teams writes into a message's text (formatting, mentions, lists, links): known tags only, so a
# question that only looks like markup ("3<5", "<url>") is kept as typed.
_HTML_TAG = re.compile(
    r"</?(at|p|div|span|br|b|strong|i|em|u|s|strike|del|ins|mark|sub|sup|a|img|ul|ol|li|code|pre|blockquote"
    r"|h[1-6]|hr|table|thead|tbody|tr|th|td|font|emoji|attachment)(?:\s[^<>]*)?/?>",
    re.IGNORECASE,
)
_AT_TAG = re.compile(r"<at(?:\s[^<>]*)?>(.*?)</at>", re.IGNORECASE | re.DOTALL)  # a mention, by its shown name
_GAP = "\x00"  # where the bot's mention was, until the text around it is joined (never in a typed message)
_CLOSING = ",.;:!?)]}…"  # punctuation that follows the word before it without a space
_LEADING_JOINER = re.compile(r"^(?:[,;:]+\s*|[-–—]\s+)")  # "@Bot, what is X" / "@Bot - what is X": "what is X"
_INLINE_TAGS = frozenset({"at", "span", "b", "strong", "i", "em", "u", "s", "strike", "del", "ins", "mark", "sub",
                          "sup", "a", "code", "font"})  # inside a word: removed, not a space


def conversation_type(activity: Activity) -> str:
    """'personal', 'channel' or 'groupChat' (Teams' own words).

    Teams always says which; an activity that does not (another channel of the Bot Framework, a
    hand-made request) is read from what it does say, and counts as shared when nothing does: taken
    for a personal chat, a group's reply would be built from the asker's own groups.
    """
    conversation = activity.get("conversation") or {}
    stated = conversation.get("conversationType")
    if stated:
        return str(stated)
    if ((activity.get("channelData") or {}).get("channel") or {}).get("id"):
        return "channel"
    return "personal" if conversation.get("isGroup") is False else "groupChat"


def channel_and_thread(activity: Activity) -> tuple[str, str]:
    """(conversation id without the thread marker, thread root id); a chat is its own thread."""
    raw = str((activity.get("conversation") or {}).get("id") or "")
    channel, _, root = raw.partition(THREAD_MARKER)
    if root:
        return channel, root
    if conversation_type(activity) == "channel":
        return channel, str(activity.get("replyToId") or activity.get("id") or channel)
    return channel, channel


def thread_conversation_id(activity: Activity) -> str:
    """The conversation id to post to so a reply lands in the message's reply chain."""
    channel, thread = channel_and_thread(activity)
    return f"{channel}{THREAD_MARKER}{thread}" if conversation_type(activity) == "channel" else channel


def tenant_of(activity: Activity) -> str:
    conversation = activity.get("conversation") or {}
    tenant = (activity.get("channelData") or {}).get("tenant") or {}
    return str(conversation.get("tenantId") or tenant.get("id") or "")


def tenant_allowed(tenant: str, allowed: frozenset[str]) -> bool:
    """An empty allow-list serves every tenant; otherwise only the listed ones."""
    return not allowed or tenant in allowed


def parse_tenants(text: str | None) -> frozenset[str]:
    return frozenset(part.strip() for part in (text or "").split(",") if part.strip())


def addressed_to_bot(activity: Activity) -> bool:
    """Personal chat: every message. Channels and group chats: only messages that @mention the bot."""
    if conversation_type(activity) == "personal":
        return True
    return bool(_bot_mentions(activity))


def question_text(activity: Activity) -> str:
    """The message text as the person typed it: without the bot's @mention, and without the HTML Teams
    sends (``<p>``, ``&nbsp;``, ``&amp;``, other people's ``<at>`` tags), which the model should never see."""
    text = _without_bot_mentions(activity, str(activity.get("text") or "").replace(_GAP, ""))
    plain = _HTML_TAG.sub(lambda tag: "" if tag.group(1).lower() in _INLINE_TAGS else " ", text)
    return _close_gaps(" ".join(html.unescape(plain).split()))


def user_of(activity: Activity, groups: GroupMap, member: dict[str, Any] | None = None) -> UserRef:
    """The sender: AAD object id, name, groups; ``member`` (the roster entry, when fetched) adds email, role
    and tenant: a guest role, or another organisation's tenant, makes the sender a guest."""
    sender = activity.get("from") or {}
    profile = {**sender, **(member or {})}
    user_id = str(profile.get("aadObjectId") or profile.get("id") or "")
    email = profile.get("email") or profile.get("userPrincipalName")
    return UserRef(
        id=user_id,
        name=str(profile.get("name") or ""),
        email=str(email) if email else None,
        groups=groups.groups_for(user_id, str(email or ""), str(sender.get("id") or "")),
        is_guest=str(profile.get("userRole") or "").lower() in GUEST_ROLES or from_elsewhere(activity, member),
    )


def from_elsewhere(activity: Activity, member: dict[str, Any] | None) -> bool:
    """Whether the roster places the sender in another organisation's tenant than the conversation's.

    In a shared channel (Teams Connect) or an external-access chat the other company's people are
    members of their own tenant, so their role reads "user", not "guest": yet they are no employees here.
    Without the roster's tenant or the conversation's, nothing says they are from elsewhere.
    """
    theirs = str((member or {}).get("tenantId") or "")
    ours = tenant_of(activity)
    return bool(theirs and ours and theirs != ours)


def to_inbound(activity: Activity, user: UserRef) -> Inbound:
    channel, thread = channel_and_thread(activity)
    return Inbound(
        platform="teams",
        tenant=tenant_of(activity),
        channel=channel,
        thread=thread,
        user=user,
        text=question_text(activity),
        event_id=event_id(activity),  # activity ids repeat across conversations
        link=deep_link(activity),
        address=reference_of(activity),  # so the thread can be told things later (crash recovery)
        shared=conversation_type(activity) != "personal",  # a channel or a group chat: read by its members
        private_channel=True,  # the person's personal chat with the bot, opened when needed (sender.py)
        files=file_names(activity),
    )


def file_names(activity: Activity) -> tuple[str, ...]:
    """The files and images attached to a message (never downloaded or read); not the HTML copy of the
    text, nor cards, which Teams sends as attachments too."""
    names = []
    for attachment in activity.get("attachments") or []:
        kind = str((attachment or {}).get("contentType") or "")
        if kind == FILE_DOWNLOAD or kind.startswith("image/"):
            fallback = "an image" if kind.startswith("image/") else "a file"
            names.append(str(attachment.get("name") or fallback))
    return tuple(names)


def address_of(activity: Activity, user: UserRef) -> Address:
    """Where the outbox posts the answer to this activity: its thread, by the stored reference."""
    channel, thread = channel_and_thread(activity)
    return Address("teams", channel, thread, reference_of(activity), user.id, user.name)


def conversation_key(activity: Activity, user: UserRef) -> str:
    """The key ``handle_message`` used for this activity's thread, for clicks that refer back to it."""
    return to_inbound(activity, user).conversation_key


def reference_of(activity: Activity) -> dict[str, Any]:
    """A conversation reference (protocol JSON) aimed at the activity's reply chain; stored for later replies."""
    conversation = dict(activity.get("conversation") or {})
    conversation["id"] = thread_conversation_id(activity)
    return {
        "activityId": activity.get("id"),
        "user": activity.get("from"),
        "bot": activity.get("recipient"),
        "conversation": conversation,
        "channelId": activity.get("channelId", "msteams"),
        "serviceUrl": activity.get("serviceUrl"),
        "locale": activity.get("locale"),
    }


def personal_reference(reference: dict[str, Any], user_id: str, conversation_id: str,
                       service_url: str | None = None) -> dict[str, Any]:
    """A reference to the bot's personal chat with ``user_id``, made from one of a shared place (same bot,
    tenant and service), for a chat the connector just created or found."""
    tenant = tenant_of_reference(reference)
    conversation = {"id": conversation_id, "conversationType": "personal", **({"tenantId": tenant} if tenant else {})}
    return {
        "user": {"id": user_id},
        "bot": reference.get("bot"),
        "conversation": conversation,
        "channelId": reference.get("channelId", "msteams"),
        "serviceUrl": service_url or reference.get("serviceUrl"),
        "locale": reference.get("locale"),
    }


def tenant_of_reference(reference: dict[str, Any]) -> str:
    return str((reference.get("conversation") or {}).get("tenantId") or "")


def clicked_card(activity: Activity) -> tuple[dict[str, Any], str | None]:
    """The reference and activity id of the message an ``adaptiveCard/action`` invoke came from.

    The conversation is the one the invoke names, as it names it: that is where the card is.
    """
    reference = reference_of(activity)
    reference["conversation"] = dict(activity.get("conversation") or {})
    card_id = activity.get("replyToId")
    return reference, str(card_id) if card_id else None


def thread_of_reference(reference: dict[str, Any]) -> tuple[str, str]:
    """(channel, thread) a stored reference posts to: the reply chain's root, or the chat itself."""
    conversation = str((reference.get("conversation") or {}).get("id") or "")
    channel, _, root = conversation.partition(THREAD_MARKER)
    return channel, root or channel


def deep_link(activity: Activity) -> str | None:
    """A link that opens the message in Teams (https://teams.microsoft.com/l/message/...)."""
    message_id = activity.get("id")
    channel, thread = channel_and_thread(activity)
    if not message_id or not channel:
        return None
    params: dict[str, str] = {}
    if conversation_type(activity) == "channel":
        team = (activity.get("channelData") or {}).get("team") or {}
        params = {"tenantId": tenant_of(activity), "parentMessageId": thread}
        if team.get("aadGroupId"):
            params["groupId"] = team["aadGroupId"]
    else:
        params = {"context": json.dumps({"contextType": "chat"}, separators=(",", ":"))}
    base = f"https://teams.microsoft.com/l/message/{quote(channel, safe='')}/{quote(str(message_id), safe='')}"
    return f"{base}?{urlencode(params)}"


def _without_bot_mentions(activity: Activity, text: str) -> str:
    """``text`` with each ``<at>`` tag that names the bot replaced by ``_GAP``, however its name is escaped.

    Teams writes the name HTML-escaped in the text (``<at>R&amp;D Bot</at>``) while the mention entity may
    hold it escaped or not; so tags are compared by the name they show, not by their characters.
    """
    mentions = _bot_mentions(activity)
    names = {_shown_name(_at_name(str(m.get("text") or "")) or _mentioned_name(m)) for m in mentions} - {""}
    text = _AT_TAG.sub(lambda tag: _GAP if _shown_name(tag.group(1)) in names else tag.group(0), text)
    for mention in mentions:  # a client that wrote the mention without <at> tags: the entity's text as is
        if (literal := str(mention.get("text") or "")) and literal in text:
            text = text.replace(literal, _GAP)
    return text


def _at_name(mention_text: str) -> str:
    """The name inside a mention's ``<at>`` tag (the whole text when it has none)."""
    tag = _AT_TAG.fullmatch(mention_text.strip())
    return tag.group(1) if tag else mention_text


def _mentioned_name(mention: dict[str, Any]) -> str:
    return str((mention.get("mentioned") or {}).get("name") or "")


def _shown_name(name: str) -> str:
    """A mentioned name as Teams shows it: unescaped, its spaces (``&nbsp;`` too) collapsed, any case."""
    return " ".join(html.unescape(name).split()).casefold()


def _close_gaps(text: str) -> str:
    """The text around each removed mention joined as typed: "Hi @Bot, what?" reads "Hi, what?"."""
    pieces = text.split(_GAP)
    joined = pieces[0].strip()
    for piece in pieces[1:]:
        joined = _join(joined, piece.strip())
    return joined


def _join(left: str, right: str) -> str:
    """The two sides of a removed mention: a space between words, none before punctuation or after an
    opening bracket, and no comma left dangling before the end of a sentence ("What is X, @Bot?")."""
    if not right:
        return left.rstrip(",;:")  # "Thanks, @Bot": "Thanks"
    if not left:
        return _LEADING_JOINER.sub("", right)
    if right[0] in _CLOSING:
        return left.rstrip(",;:") + right
    return left + right if left[-1] in "([{" else f"{left} {right}"


def _bot_mentions(activity: Activity) -> list[dict[str, Any]]:
    bot_id = (activity.get("recipient") or {}).get("id")
    return [
        entity
        for entity in activity.get("entities") or []
        if entity.get("type") == "mention" and (entity.get("mentioned") or {}).get("id") == bot_id
    ]
