"""Round trips of the platform's own example events: nothing may be lost or reshaped."""

from __future__ import annotations

import json
import tracemalloc
from pathlib import Path
from typing import Any, get_args

import pytest
from hypothesis import given
from hypothesis import strategies as st

from llm_bot.events.codec import copy_of, decode, encode, from_document, to_document
from llm_bot.events.limits import InvalidEvent
from llm_bot.events.models import RoutingStatus

CONTRACTS = Path(__file__).resolve().parents[2] / "fixtures" / "bitbrat"


def example_events() -> list[Path]:
    paths = sorted(CONTRACTS.glob("*.json"))
    return [p for p in paths if json.loads(p.read_text()).get("v") == "2"]


def test_the_platform_examples_are_present() -> None:
    assert len(example_events()) >= 2, f"no example events found in {CONTRACTS}"


@pytest.mark.parametrize("path", example_events(), ids=lambda p: p.name)
def test_example_event_round_trips_to_equal_json(path: Path) -> None:
    original = json.loads(path.read_text())
    data, attributes = encode(decode(path.read_bytes()))
    assert json.loads(data) == original
    assert attributes == {"type": original["type"], "correlationId": original["correlationId"]}


def test_routing_slip_schema_matches_our_step_model() -> None:
    schema = json.loads((CONTRACTS / "routing-slip.v1.json").read_text())["items"]
    assert set(schema["properties"]["status"]["enum"]) == set(get_args(RoutingStatus))
    assert set(schema["required"]) == {"id", "status"}


json_leaf = st.one_of(st.none(), st.booleans(), st.integers(), st.text(max_size=20))
json_value = st.recursive(
    json_leaf,
    lambda children: st.one_of(
        st.lists(children, max_size=3), st.dictionaries(st.text(max_size=8), children, max_size=3)
    ),
    max_leaves=10,
)
unknown_keys = st.text(min_size=1, max_size=12).filter(lambda k: k.startswith("x"))


@given(
    top=st.dictionaries(unknown_keys, json_value, max_size=3),
    nested=st.dictionaries(unknown_keys, json_value, max_size=3),
    step_extra=st.dictionaries(unknown_keys, json_value, max_size=2),
)
def test_fields_we_do_not_model_survive_anywhere(
    top: dict[str, Any], nested: dict[str, Any], step_extra: dict[str, Any]
) -> None:
    document = json.loads((CONTRACTS / "dm-message.json").read_text())
    document.update(top)
    document["identity"]["external"].update(nested)
    document["egress"].update(nested)
    document["routing"]["slip"] = [{"id": "llm-bot", "status": "PENDING", **step_extra}]
    document["annotations"] = [
        {"id": "a1", "kind": "prompt", "source": "t", "createdAt": "2026-01-01T00:00:00Z", **nested}
    ]
    assert to_document(from_document(json.loads(json.dumps(document)))) == document


OPTIONAL_ANNOTATION_FIELDS = ("source", "createdAt", "confidence", "label", "score", "payload")


@given(values=st.dictionaries(st.sampled_from(OPTIONAL_ANNOTATION_FIELDS), json_value, max_size=6))
def test_annotation_fields_of_any_json_type_are_kept_and_read_as_unset(
    values: dict[str, Any],
) -> None:
    """The platform's consumers read an annotation's fields with fallbacks (a numeric label
    is no label), so such an event is processed, not refused, and published as it came."""
    document = json.loads((CONTRACTS / "chat-message.json").read_text())
    document["annotations"] = [{"id": "r1", "kind": "risk", **values}]
    event = from_document(json.loads(json.dumps(document)))
    assert to_document(event) == document
    [annotation] = event.annotations or []
    assert annotation.label is None or isinstance(annotation.label, str)
    assert annotation.payload is None or isinstance(annotation.payload, dict)


def test_an_annotation_without_a_textual_id_or_kind_is_still_invalid() -> None:
    document = json.loads((CONTRACTS / "chat-message.json").read_text())
    document["annotations"] = [{"id": 7, "kind": "risk", "label": 3}]
    with pytest.raises(InvalidEvent, match=r"annotations\.0\.id"):
        from_document(document)


@pytest.mark.parametrize(
    ("mutate", "named"),
    [
        (lambda d: d.pop("correlationId"), "correlationId: Field required"),
        (lambda d: d.update(v="1"), "v: Input should be '2'"),
        (
            lambda d: d["routing"].update(slip=[{"id": "x", "status": "DONE"}]),
            "routing.slip.0.status",
        ),
        (lambda d: d["identity"]["external"].pop("id"), "identity.external.id: Field required"),
        (
            lambda d: d["egress"].update(destination=7),
            "egress.destination: Input should be a valid string",
        ),
        (lambda d: d.update(annotations="prompt"), "annotations: Input should be a valid list"),
    ],
)
def test_invalid_envelopes_name_the_field(mutate: Any, named: str) -> None:
    document = json.loads((CONTRACTS / "chat-message.json").read_text())
    mutate(document)
    with pytest.raises(InvalidEvent, match="invalid InternalEventV2") as raised:
        from_document(document)
    assert named in str(raised.value)


@pytest.mark.parametrize(
    ("data", "reason"),
    [
        (b"\xff\xfe", "not UTF-8"),
        (b"{not json", "not JSON"),
        (b"[1, 2]", "must be a JSON object, got list"),
        (b"{}" + b" " * 100, "over the limit of 50"),
    ],
)
def test_undecodable_bodies_get_a_specific_reason(data: bytes, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        decode(data, max_bytes=50)


@pytest.mark.parametrize(
    ("number", "reason"),
    [
        ("NaN", "NaN is no JSON number"),
        ("Infinity", "Infinity is no JSON number"),
        ("-Infinity", "-Infinity is no JSON number"),
        ("1e400", "beyond a 64-bit float: 1e400"),
        ("-2.5E+308", "beyond a 64-bit float: -2.5E\\+308"),
        ("1" * 310, "beyond a 64-bit float: 1{32}\\.\\.\\.$"),
        ("-" + "7" * 5000, "beyond a 64-bit float: -7{31}\\.\\.\\.$"),
    ],
)
def test_numbers_json_readers_refuse_or_cannot_hold_are_invalid(number: str, reason: str) -> None:
    with pytest.raises(InvalidEvent, match=reason):
        decode(b'{"v": "2", "payload": {"x": [1, %s]}}' % number.encode())


@pytest.mark.parametrize("number", ["1.7976931348623157e308", "9" * 308, "-0", "1e-400"])
def test_numbers_a_64_bit_float_holds_are_kept(number: str) -> None:
    with pytest.raises(InvalidEvent, match="invalid InternalEventV2"):  # past the numbers
        decode(b'{"v": "2", "payload": {"x": %s}}' % number.encode())


LONG_KEY = "k" * 100_000


@pytest.mark.parametrize(
    ("hostile", "reason"),
    [
        ({LONG_KEY: [0] * 1000}, "invalid InternalEventV2"),
        ({LONG_KEY: {str(i): 0 for i in range(1000)}}, "invalid InternalEventV2"),
        ({LONG_KEY: [0] * 999 + ["\x00"]}, f"event.payload.{LONG_KEY}[999]: contains NUL"),
    ],
    ids=["list", "object", "refused"],
)
def test_a_long_key_over_many_values_costs_memory_of_the_body_not_their_product(
    hostile: dict[str, Any], reason: str
) -> None:
    """Checking a body's text walks every value once; a value's path is spelt out only for the
    error that names it, so a 100 kB key over a thousand values is not a hundred megabytes."""
    data = json.dumps({"v": "2", "payload": hostile}).encode()
    tracemalloc.start()
    try:
        with pytest.raises(InvalidEvent) as raised:
            decode(data, max_bytes=1_048_576)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert str(raised.value).startswith(reason)
    assert peak < 20 * len(data)


def test_nothing_published_carries_nan_or_an_infinity() -> None:
    """A value set after decoding (a step's annotation) is refused, not written as ``NaN``."""
    document = json.loads(example_events()[0].read_text())
    score = {"id": "a1", "kind": "score", "source": "rules", "createdAt": "2026-01-01T00:00:00Z"}
    for value in (float("nan"), float("inf")):
        event = from_document({**document, "annotations": [{**score, "score": value}]})
        with pytest.raises(ValueError, match="not JSON compliant"):
            encode(event)


@pytest.mark.parametrize("path", example_events(), ids=lambda p: p.name)
def test_a_copy_publishes_as_the_event_and_shares_nothing_it_may_change(path: Path) -> None:
    document = json.loads(path.read_text())
    document["routing"]["slip"] = [{"id": "llm-bot", "status": "PENDING", "xNote": {"n": 1}}]
    event = from_document(document)
    before = encode(event)
    copy = copy_of(event)
    assert encode(copy) == before
    copy.routing.slip[0].status = "OK"
    copy.routing.slip[0].model_extra["xNote"]["n"] = 2  # type: ignore[index]
    copy.egress.destination = "elsewhere"
    assert encode(event) == before
