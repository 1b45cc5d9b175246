#!/usr/bin/env python3
"""Recomputes idem's test vectors from docs/SPEC.md, independently of the Rust code.

Reads docs/id-vectors.json and docs/hash-vectors.json (next to this script), recomputes every
id, hash part, content-hash encoding and content hash with the algorithms of docs/SPEC.md
implemented here from scratch (Python standard library only), and checks that the tables of
SPEC.md show exactly these vectors: every vector's name, id, hash part, canonical bytes and hash
appear in SPEC.md, and every ULID or SHA-256 written in SPEC.md belongs to a vector.

Run from anywhere:  python3 docs/check_vectors.py
Prints one line per vector, then `<n> passed, <m> failed`; exits 1 on any failure.
"""

import hashlib
import json
import os
import re
import struct
import sys

HERE = os.path.dirname(os.path.abspath(__file__))

# --- ids -----------------------------------------------------------------------------------

CROCKFORD = "0123456789ABCDEFGHJKMNPQRSTVWXYZ"
MAX_TIMESTAMP_MS = (1 << 48) - 1
I128_MIN = -(1 << 127)
I128_MAX = (1 << 127) - 1
U128_MAX = (1 << 128) - 1


class IdError(Exception):
    """A refusal: `kind` is the error name used in id-vectors.json."""

    def __init__(self, kind, key_index=None, problem=None):
        super().__init__(kind)
        self.kind = kind
        self.key_index = key_index
        self.problem = problem


def ulid_text(timestamp_ms, hash_part):
    """Crockford base32 of the 128-bit ULID: 26 characters, the first holding the top 3 bits."""
    assert 0 <= timestamp_ms <= MAX_TIMESTAMP_MS and len(hash_part) == 10
    value = int.from_bytes(timestamp_ms.to_bytes(6, "big") + hash_part, "big")
    return "".join(CROCKFORD[(value >> (5 * i)) & 31] for i in range(25, -1, -1))


def u64_be(n):
    return n.to_bytes(8, "big")


def key_int(key):
    value = int(key["value"])
    if not I128_MIN <= value <= U128_MAX:
        raise ValueError("integer key out of range: %s" % key["value"])
    return value


def v1_bytes(keys):
    """The bytes the v1 scheme hashes: each key's tagged encoding, in order."""
    out = bytearray()
    for index, key in enumerate(keys):
        kind = key["type"]
        if kind in ("text", "char"):
            text = key["value"].encode("utf-8")
            if kind == "char" and len(key["value"]) != 1:
                raise ValueError("a char key is one code point")
            if not text:
                raise IdError("empty_key", key_index=index)
            out += b"\x01" + u64_be(len(text)) + text
        elif kind == "int":
            value = key_int(key)
            if value <= I128_MAX:
                out += b"\x02" + value.to_bytes(16, "big", signed=True)
            else:
                out += b"\x03" + value.to_bytes(16, "big")
        elif kind == "bool":
            out += b"\x04" + (b"\x01" if key["value"] else b"\x00")
        else:
            raise ValueError("unknown key type %r" % kind)
    return bytes(out)


def joined_text(key):
    kind = key["type"]
    if kind in ("text", "char"):
        return key["value"]
    if kind == "int":
        return str(key_int(key))
    if kind == "bool":
        return "true" if key["value"] else "false"
    raise ValueError("unknown key type %r" % kind)


def joined_bytes(keys):
    """The bytes the joined scheme hashes: the keys' text joined by ':'."""
    texts = []
    for index, key in enumerate(keys):
        text = joined_text(key)
        if text == "":
            raise IdError("empty_key", key_index=index)
        if ":" in text:
            raise IdError("ambiguous_key", key_index=index)
        texts.append(text)
    return ":".join(texts).encode("utf-8")


def timestamp_ms(vector):
    """Milliseconds for the id's time part: 0 without a timestamp; floor of nanoseconds."""
    if vector.get("timestamp_ns") is not None:
        millis = int(vector["timestamp_ns"]) // 1_000_000  # floor, also below zero
    elif vector.get("timestamp_ms") is not None:
        millis = int(vector["timestamp_ms"])
    else:
        return 0
    if millis < 0:
        raise IdError("timestamp_out_of_range", problem="before_unix_epoch")
    if millis > MAX_TIMESTAMP_MS:
        raise IdError("timestamp_out_of_range", problem="after_ulid_range")
    return millis


def derive_id(vector):
    """(hashed bytes, sha256 digest, id text) of an id vector, or raises IdError.

    Keys are checked before the timestamp, so a bad key wins over a bad timestamp.
    """
    encode = {"v1": v1_bytes, "joined": joined_bytes}[vector["scheme"]]
    hashed = encode(vector["keys"])
    digest = hashlib.sha256(hashed).digest()
    return hashed, digest, ulid_text(timestamp_ms(vector), digest[:10])


def check_id_vector(vector):
    """A list of problems with one id vector (empty if it passes)."""
    try:
        hashed, digest, id_text = derive_id(vector)
    except IdError as error:
        problems = []
        if "error" not in vector:
            return ["refused with %s, expected id %s" % (error.kind, vector.get("id"))]
        if error.kind != vector["error"]:
            problems.append("error %s, expected %s" % (error.kind, vector["error"]))
        if vector.get("error_key_index") != error.key_index:
            problems.append(
                "error on key %s, expected key %s" % (error.key_index, vector.get("error_key_index"))
            )
        if vector.get("timestamp_problem") != error.problem:
            problems.append(
                "timestamp problem %s, expected %s" % (error.problem, vector.get("timestamp_problem"))
            )
        return problems
    if "error" in vector:
        return ["gave id %s, expected error %s" % (id_text, vector["error"])]
    expected = {
        "hashed_hex": hashed.hex(),
        "sha256_hex": digest.hex(),
        "hash_part_hex": digest[:10].hex(),
        "id": id_text,
    }
    return [
        "%s is %s, expected %s" % (field, value, vector.get(field))
        for field, value in expected.items()
        if vector.get(field) != value
    ]


# --- content hash --------------------------------------------------------------------------

CANONICAL_NAN = 0x7FF8000000000000


def text_bytes(tag, data):
    return bytes([tag]) + u64_be(len(data)) + data


def float_bits(bits):
    """The hashed bits of an f64: one NaN, one zero."""
    exponent, mantissa = (bits >> 52) & 0x7FF, bits & ((1 << 52) - 1)
    if exponent == 0x7FF and mantissa != 0:
        return CANONICAL_NAN
    if bits & ~(1 << 63) == 0:
        return 0
    return bits


def encode_entries(entries, excluded):
    """A map's entries sorted by their keys' encoding bytes; top-level text keys excluded."""
    encoded = []
    for key, value in entries:
        key_bytes = encode(key)
        if excluded and key_bytes[0] == 0x05 and key_bytes[9:].decode("utf-8") in excluded:
            continue
        encoded.append((key_bytes, encode(value)))
    encoded.sort(key=lambda entry: entry[0])  # stable, like Rust's sort_by
    return b"\x09" + b"".join(k + v for k, v in encoded) + b"\x0a"


def encode_fields(fields, excluded):
    out = bytearray(b"\x0b")
    for name, value in fields:
        if excluded and name in excluded:
            continue
        out += text_bytes(0x05, name.encode("utf-8")) + encode(value)
    return bytes(out + b"\x0c")


def encode(value, excluded=None):
    """The canonical encoding of a typed value of hash-vectors.json (see SPEC.md).

    `excluded` holds the stored names left out of a document's top-level struct or map.
    """
    (kind, payload), = value.items()
    if kind in ("null", "none", "unit", "unit_struct"):
        return b"\x00"
    if kind in ("some", "newtype_struct"):
        return encode(payload, excluded)  # transparent: still the top level
    if kind == "bool":
        return b"\x01" + (b"\x01" if payload else b"\x00")
    if kind == "int":
        number = int(payload)
        if I128_MIN <= number <= I128_MAX:
            return b"\x02" + number.to_bytes(16, "big", signed=True)
        if number <= U128_MAX:
            return b"\x03" + number.to_bytes(16, "big")
        raise ValueError("integer out of range: %s" % payload)
    if kind == "f64":
        (bits,) = struct.unpack(">Q", struct.pack(">d", float(payload)))
        return b"\x04" + u64_be(float_bits(bits))
    if kind == "f64_bits":
        return b"\x04" + u64_be(float_bits(int(payload, 16)))
    if kind == "f32_bits":
        (widened,) = struct.unpack(">f", bytes.fromhex(payload))  # exact: every f32 is an f64
        (bits,) = struct.unpack(">Q", struct.pack(">d", widened))
        # struct turns a signalling f32 NaN into some NaN; every NaN hashes alike anyway.
        return b"\x04" + u64_be(float_bits(bits))
    if kind in ("text", "char"):
        return text_bytes(0x05, payload.encode("utf-8"))
    if kind == "bytes":
        return text_bytes(0x06, bytes.fromhex(payload))
    if kind in ("seq", "tuple", "tuple_struct"):
        return b"\x07" + b"".join(encode(item) for item in payload) + b"\x08"
    if kind == "map":
        return encode_entries(payload, excluded)
    if kind == "struct":
        return encode_fields(payload["fields"], excluded)
    if kind == "unit_variant":
        return b"\x0d" + text_bytes(0x05, payload.encode("utf-8"))
    if kind == "newtype_variant":
        name, inner = payload
        return b"\x0e" + text_bytes(0x05, name.encode("utf-8")) + encode(inner)
    if kind == "tuple_variant":
        name, items = payload
        return b"\x0e" + text_bytes(0x05, name.encode("utf-8")) + encode({"seq": items})
    if kind == "struct_variant":
        name, fields = payload
        return b"\x0e" + text_bytes(0x05, name.encode("utf-8")) + encode_fields(fields, None)
    raise ValueError("unknown value kind %r" % kind)


def check_hash_vector(vector):
    excluded = None
    if "document" in vector:
        document = vector["document"]
        excluded = set(document["volatile"]) | {document["hash_field"]}
    canonical = encode(vector["input"], excluded)
    expected = {"canonical_hex": canonical.hex(), "hash": hashlib.sha256(canonical).hexdigest()}
    return [
        "%s is %s, expected %s" % (field, value, vector.get(field))
        for field, value in expected.items()
        if vector.get(field) != value
    ]


# --- SPEC.md -------------------------------------------------------------------------------


class Spec:
    """What SPEC.md shows: its code spans and its `hex` blocks, spaces and comments removed."""

    def __init__(self, text):
        self.text = text
        self.spans = {re.sub(r"\s+", "", span) for span in re.findall(r"`([^`\n]+)`", text)}
        self.blocks = set()
        for block in re.findall(r"```hex\n(.*?)```", text, re.S):
            lines = (line.split("#", 1)[0] for line in block.splitlines())
            self.blocks.add(re.sub(r"\s+", "", "".join(lines)))

    def shows(self, value):
        return value in self.spans or value in self.blocks


def spec_problems(vector, fields, spec):
    return [
        "%s %s is not shown in SPEC.md" % (field, vector[field])
        for field in fields
        if field in vector and not spec.shows(vector[field])
    ]


def unknown_in_spec(spec, ids, digests):
    """ULIDs and SHA-256 digests written in SPEC.md that no vector has."""
    problems = []
    for token in sorted(set(re.findall(r"\b[0-9A-HJKMNP-TV-Z]{26}\b", spec.text)) - ids):
        if re.search(r"\d", token):  # a ULID, not a 26-letter word
            problems.append("SPEC.md shows id %s, which no vector has" % token)
    for token in sorted(set(re.findall(r"\b[0-9a-f]{64}\b", spec.text)) - digests):
        problems.append("SPEC.md shows digest %s, which no vector has" % token)
    return problems


def load(name):
    with open(os.path.join(HERE, name), encoding="utf-8") as file:
        return json.load(file)


def main():
    with open(os.path.join(HERE, "SPEC.md"), encoding="utf-8") as file:
        spec = Spec(file.read())
    id_vectors = load("id-vectors.json")
    hash_vectors = load("hash-vectors.json")
    passed = failed = 0

    def report(label, problems):
        nonlocal passed, failed
        if problems:
            failed += 1
            print("FAIL %s: %s" % (label, "; ".join(problems)))
        else:
            passed += 1
            print("ok   %s" % label)

    names = [vector["name"] for vector in id_vectors + hash_vectors]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        report("vector names are unique", ["duplicated: %s" % ", ".join(duplicates)])

    for vector in id_vectors:
        label = "id %s: %s" % (vector["name"], vector.get("id") or vector.get("error"))
        fields = ("name", "id", "hash_part_hex") if "id" in vector else ("name",)
        try:
            problems = check_id_vector(vector) + spec_problems(vector, fields, spec)
        except (KeyError, ValueError, TypeError) as error:
            problems = ["malformed vector: %r" % error]
        report(label, problems)

    for vector in hash_vectors:
        label = "hash %s: %s" % (vector["name"], vector.get("hash"))
        try:
            problems = check_hash_vector(vector)
            problems += spec_problems(vector, ("name", "canonical_hex", "hash"), spec)
        except (KeyError, ValueError, TypeError) as error:
            problems = ["malformed vector: %r" % error]
        report(label, problems)

    ids = {vector["id"] for vector in id_vectors if "id" in vector}
    digests = {vector["hash"] for vector in hash_vectors}
    digests |= {vector["sha256_hex"] for vector in id_vectors if "sha256_hex" in vector}
    for problem in unknown_in_spec(spec, ids, digests):
        report("SPEC.md tables", [problem])

    print("%d passed, %d failed" % (passed, failed))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
