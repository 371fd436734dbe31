"""Serdes: round trips, order preservation, tuple prefixes, typed store facades."""

from __future__ import annotations

import pyarrow as pa
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from spark_statestore import Serdes, Stores, Windowed
from spark_statestore.stores.clock import Clock

INT64 = st.integers(min_value=-(2**63), max_value=2**63 - 1)


@given(st.lists(st.text(), min_size=2, max_size=20))
def test_string_keys_preserve_order(values):
    serde = Serdes.string()
    assert sorted(values, key=serde.encode) == sorted(values, key=lambda s: [ord(c) for c in s])
    for v in values:
        if not any(0xD800 <= ord(c) <= 0xDFFF for c in v):
            assert serde.decode(serde.encode(v)) == v


@given(st.lists(INT64, min_size=2, max_size=20))
def test_int64_keys_preserve_order_negatives_first(values):
    serde = Serdes.int64_key()
    assert sorted(values, key=serde.encode) == sorted(values)
    assert all(serde.decode(serde.encode(v)) == v for v in values)


@settings(max_examples=200)
@given(st.lists(st.tuples(st.text(max_size=4), INT64, st.binary(max_size=4)), min_size=2, max_size=20))
def test_tuple_keys_preserve_component_order(values):
    serde = Serdes.tuple(str, int, bytes)
    values = [v for v in values if not any(0xD800 <= ord(c) <= 0xDFFF for c in v[0])]
    natural = sorted(values, key=lambda t: ([ord(c) for c in t[0]], t[1], t[2]))
    assert sorted(values, key=serde.encode) == natural
    assert all(serde.decode(serde.encode(v)) == v for v in values)


@given(st.text(max_size=4), st.text(max_size=4), INT64)
def test_tuple_prefix_is_a_byte_prefix(a, b, n):
    serde = Serdes.tuple(str, str, int)
    try:
        full = serde.encode((a, b, n))
    except UnicodeEncodeError:
        return
    assert full.startswith(serde.prefix(a))
    assert full.startswith(serde.prefix(a, b))


def test_tuple_prefix_keeps_shorter_strings_first():
    serde = Serdes.tuple(str, int)
    assert serde.encode(("a", 5)) < serde.encode(("a\x00", -5)) < serde.encode(("ab", -9))
    assert serde.encode(("", 0)) < serde.encode(("\x00", 0))


def test_value_serdes_round_trip():
    cases = [
        (Serdes.bytes(), b"\x00\xff"),
        (Serdes.string(), "héllo"),
        (Serdes.int64(), -(2**63)),
        (Serdes.float64(), 2.5),
        (Serdes.json(), {"a": [1, 2, None], "b": "x"}),
        (Serdes.pickle(), {("t", 1): {3, 4}}),
    ]
    for serde, value in cases:
        assert serde.decode(serde.encode(value)) == value
    table = pa.table({"a": [1, 2], "b": ["x", "y"]})
    arrow = Serdes.arrow()
    assert arrow.decode(arrow.encode(table)).equals(table)


def test_serde_errors_name_the_value():
    with pytest.raises(ValueError, match="must fit in a signed 64-bit integer, got 9223372036854775808"):
        Serdes.int64().encode(2**63)
    with pytest.raises(TypeError, match="key must be an int, got str: 'x'"):
        Serdes.int64_key().encode("x")
    with pytest.raises(TypeError, match="value must be a str, got int: 3"):
        Serdes.string().encode(3)
    with pytest.raises(TypeError, match="key must be a tuple of 2 components"):
        Serdes.tuple(str, int).encode(("a",))
    with pytest.raises(TypeError, match=r"key\[1\] must be an int"):
        Serdes.tuple(str, int).encode(("a", "b"))
    with pytest.raises(TypeError, match="not JSON serializable"):
        Serdes.json().encode({1, 2})
    with pytest.raises(TypeError, match="component_types may only hold"):
        Serdes.tuple(float)


class _LoudStr(str):
    pass


class _ShoutingStrSerde(type(Serdes.string())):  # type: ignore[misc]
    def encode(self, value, name="value"):
        return super().encode(value.upper(), name)


@pytest.mark.parametrize(
    "serde, values, stored",
    [
        (Serdes.string(), ["", "héllo", _LoudStr("x"), "\ud800", None, 3, b"x"], [b"ok", b"\xff", None, 5]),
        (Serdes.int64(), [0, -(2**63), 2**63 - 1, 2**63, True, None, 2.0, "1"], [bytes(8), b"\x01" * 7, None, "x"]),
        (_ShoutingStrSerde(), ["abc", None, 1], [b"abc", b"\xff", None]),
    ],
)
@pytest.mark.parametrize("nullable", [False, True])
def test_per_record_codecs_do_what_encode_and_decode_do(serde, values, stored, nullable):
    """`encoder`/`decoder` (the typed stores' per-record path) give encode's and decode's
    results and errors, `None` passing through only when nullable."""

    def outcome(fn, arg):
        try:
            return fn(arg)
        except (TypeError, ValueError, AttributeError) as e:
            return type(e), str(e)

    encode = serde.encoder("key", nullable)
    for value in values:
        expected = None if (value is None and nullable) else outcome(lambda v: serde.encode(v, "key"), value)
        assert outcome(encode, value) == expected, value
    decode = serde.decoder(nullable)
    for data in stored:
        expected = None if (data is None and nullable) else outcome(serde.decode, data)
        assert outcome(decode, data) == expected, data


def test_a_typed_iterator_closes_the_store_iterator_it_decodes(kv_store):
    typed = kv_store.typed(Serdes.string(), Serdes.int64())
    typed.put_columns(["a", "b", "c"], [1, 2, 3])
    it = typed.all()
    assert next(it) == ("a", 1)
    inner = it._inner
    it.close()
    assert list(inner) == [] and list(it) == []
    assert list(typed.range("b", None)) == [("b", 2), ("c", 3)]


def test_typed_key_value_store(kv_store):
    typed = kv_store.typed(Serdes.tuple(str, int), Serdes.json())
    typed.put(("user", 2), {"n": 2})
    typed.put(("user", -1), {"n": -1})
    typed.put(("other", 0), [1])
    typed.put(("user", 10), None)
    assert typed.get(("user", 2)) == {"n": 2}
    assert [k for k, _ in typed.prefix_scan(("user",))] == [("user", -1), ("user", 2)]
    assert [k for k, _ in typed.range(("user", -5), ("user", 5))] == [("user", -1), ("user", 2)]
    assert [k for k, _ in typed.reverse_all()] == [("user", 2), ("user", -1), ("other", 0)]
    assert typed.put_if_absent(("user", 2), {"n": 0}) == {"n": 2}
    assert typed.delete(("other", 0)) == [1]
    assert typed.name == kv_store.name
    it = typed.all()
    assert it.peek_next_key() == ("user", -1)
    it.close()


def test_typed_window_store(window_factory):
    typed = window_factory(retention=1000).typed(Serdes.string(), Serdes.int64())
    typed.put("a", 1, 0)
    typed.put("b", 2, 0)
    typed.put("a", 3, 10)
    assert typed.get("a", 10) == 3
    assert list(typed.fetch("a", 0, 100)) == [(0, 1), (10, 3)]
    assert list(typed.backward_fetch("a", 0, 100)) == [(10, 3), (0, 1)]
    assert [(w.key, w.window.start, v) for w, v in typed.fetch_all(0, 100)] == [
        ("a", 0, 1),
        ("b", 0, 2),
        ("a", 10, 3),
    ]
    first = next(typed.fetch_range("a", "b", 0, 0))
    assert first == (Windowed("a", first[0].window), 1)
    assert typed.observed_stream_time == 10  # passed through to the store


def test_a_typed_store_offers_read_only_typed_views_and_passes_its_surface_through(tmp_path):
    kv = Stores.persistent_key_value_store("kv", tmp_path / "kv").typed(Serdes.string(), Serdes.json())
    kv.put("a", {"n": 1})
    kv.commit({"n": 1})
    kv.put("b", [2])
    committed, uncommitted = kv.read_only("READ_COMMITTED"), kv.read_only("READ_UNCOMMITTED")
    assert committed.get("a") == {"n": 1} and committed.get("b") is None  # typed, at the isolation asked
    assert list(uncommitted.all()) == [("a", {"n": 1}), ("b", [2])]
    with pytest.raises(AttributeError, match="views cannot write"):
        committed.put("c", 1)
    assert (kv.name, kv.persistent, kv.is_open, kv.committed_offset("n")) == ("kv", True, True, 1)
    assert kv.approximate_num_uncommitted_bytes() > 0 and kv.approximate_num_entries() >= 1
    kv.rollback()
    assert kv.approximate_num_uncommitted_bytes() == 0 and kv.transaction_metrics.rollbacks == 1
    kv.close()
    assert not kv.is_open

    win = Stores.persistent_window_store("w", tmp_path / "w", 100, 10, clock="external").typed(
        Serdes.string(), Serdes.int64()
    )
    win.put("a", 5, 40)
    win.advance_stream_time(200)
    assert (win.observed_stream_time, win.retention_period, win.window_size, win.retain_duplicates) == (200, 100, 10, False)
    assert win.clock is Clock.WATERMARK and win.metrics.dropped_records_total == 0
    win.commit({})
    view = win.read_only("READ_COMMITTED")
    assert list(view.fetch_all(0, 1000)) == [] and view.observed_stream_time == 200  # expired at 200
    win.close()
    # nothing else is forwarded: what a typed store offers is what its class says
    with pytest.raises(AttributeError):
        win.keyspace  # noqa: B018


class _BigInt(int):
    pass


def outcome(fn):
    """What `fn()` returns, or the type and message of the TypeError or ValueError it raises."""
    try:
        return fn()
    except (TypeError, ValueError) as e:
        return type(e), str(e)


@pytest.mark.parametrize(
    "serde, columns",
    [
        (Serdes.string(), [["a", "héllo", ""], ["a", "\ud800"], ["a", _LoudStr("x")], ["a", 3], ["a", None], []]),
        (Serdes.int64(), [[0, -(2**63), 2**63 - 1], [1, 2**63], [1, -(2**63) - 1], [1, True], [1, _BigInt(5)], [1, 2.0], []]),
        (_ShoutingStrSerde(), [["abc", "d"]]),
    ],
)
def test_encoding_a_list_column_does_what_encoding_each_value_does(serde, columns):
    """`encode_many` of a Python list (at C level when every value is exactly a str, or an
    int, of the serde) gives encode's results, and for a bad value encode's error."""

    for column in columns:
        expected = outcome(lambda: [serde.encode(v, "key") for v in column])
        assert outcome(lambda: serde.encode_many(column, "key")) == expected, column


class _QuietBytesDecoder(type(Serdes.string())):
    """A str serde whose `decode` is its own: `decode_many` must use it."""

    def decode(self, data):
        return "decoded:" + data.decode()


@pytest.mark.parametrize(
    "serde, columns",
    [
        (
            Serdes.string(),
            [[b"a", "h\u00e9llo".encode(), b""], [b"a", b"\xff"], [b"a", None], [b"a", bytearray(b"x")], []],
        ),
        (
            Serdes.int64(),
            [
                [(5).to_bytes(8, "big"), (-1).to_bytes(8, "big", signed=True)],
                [(5).to_bytes(8, "big"), None, None, (7).to_bytes(8, "big")],
                [None],
                [(5).to_bytes(8, "big"), b"\x01"],
                [(5).to_bytes(8, "big"), "abcdefgh"],
                [],
            ],
        ),
        (_QuietBytesDecoder(), [[b"ab", b"c"]]),
    ],
)
def test_decoding_a_list_column_does_what_decoding_each_value_does(serde, columns):
    """`decode_many` (at C level or by numpy where the data allow) gives decode's results
    (None stays None), and for bytes the serde did not write, decode's error."""

    for column in columns:
        expected = outcome(lambda: [None if v is None else serde.decode(v) for v in column])
        assert outcome(lambda: serde.decode_many(column)) == expected, column
