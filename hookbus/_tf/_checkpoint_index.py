"""Whether a TensorFlow checkpoint is whole, from its index alone: no tensor is read.

A checkpoint of ``tf.compat.v1.train.Saver`` or ``tf.train.Checkpoint`` is ``<prefix>.index``, a
TensorBundle, and its data files ``<prefix>.data-0000i-of-0000N``. The index is an SSTable
(TensorFlow's ``tensorflow/core/lib/io/table``, LevelDB's format): blocks of sorted
``key -> value`` entries, each block followed by a trailer (its compression type and the masked
CRC-32C of the block and that type), an index block naming the data blocks, and a 48-byte footer
ending in a magic number. Under the key ``""`` is a ``BundleHeaderProto`` (``num_shards``); under
each tensor's name a ``BundleEntryProto`` says which data file holds its bytes, at which offset,
how many, and their CRC-32C.

:func:`index_problem` checks what a copy or a full disk that stopped short, a damaged index or a
lost data file breaks: the footer, every block's checksum, the entries, each data file's presence
and that it is long enough for every tensor the index places in it. Reading the index costs
a few kilobytes where reading the tensors back costs the model's size (a second read of the model
before the restore reads it again: ``bench/startup.py``). What it cannot see is a damaged byte
inside a tensor's data; TensorFlow's restore checks each tensor's CRC-32C and fails with
``DataLossError`` there. A compressed block (TensorFlow writes none) is :class:`CompressedIndex`:
the caller then reads the checkpoint the slow way.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Iterator
from typing import NamedTuple

__all__ = [
    "BundleIndex",
    "CompressedIndex",
    "DamagedIndex",
    "Entry",
    "crc32c",
    "data_file",
    "index_problem",
    "parse_index",
    "unmask",
]

_MAGIC = 0xDB4775248B80FB57  # the last 8 bytes of every TensorFlow table (table/format.h kTableMagicNumber)
_FOOTER = 48  # two block handles of at most 20 bytes each, padded, then the magic number
_TRAILER = 5  # after each block: its compression type byte, then the masked CRC-32C of block and type
_NO_COMPRESSION, _SNAPPY = 0, 1
_MASK_DELTA = 0xA282EAD8  # crc32c::Mask's constant (lib/hash/crc32c.h)


class CompressedIndex(Exception):
    """The index holds a compressed block, which this reader does not decompress."""


class DamagedIndex(Exception):
    """The index is not a whole TensorBundle index (the message says where)."""


def _crc_table() -> tuple[int, ...]:
    table = []
    for byte in range(256):
        crc = byte
        for _ in range(8):
            crc = (crc >> 1) ^ 0x82F63B78 if crc & 1 else crc >> 1  # CRC-32C (Castagnoli), reflected
        table.append(crc)
    return tuple(table)


_CRC_TABLE = _crc_table()


def crc32c(data: bytes) -> int:
    """The CRC-32C of ``data`` (pure Python: an index is a few kilobytes, never the tensors)."""
    crc = 0xFFFFFFFF
    table = _CRC_TABLE
    for byte in data:
        crc = table[(crc ^ byte) & 0xFF] ^ (crc >> 8)
    return crc ^ 0xFFFFFFFF


def unmask(masked: int) -> int:
    """The CRC a TensorFlow file stores ``masked`` (``crc32c::Unmask``)."""
    rotated = (masked - _MASK_DELTA) & 0xFFFFFFFF
    return ((rotated >> 17) | (rotated << 15)) & 0xFFFFFFFF


def _varint(data: bytes, at: int) -> tuple[int, int]:
    """The varint64 at ``data[at:]`` and the position after it."""
    value = shift = 0
    while shift < 64:
        if at >= len(data):
            raise DamagedIndex("a length runs past the end of its block")
        byte = data[at]
        at += 1
        value |= (byte & 0x7F) << shift
        if not byte & 0x80:
            return value, at
        shift += 7
    raise DamagedIndex("a length is longer than 64 bits")


def _block(index: bytes, handle: bytes, what: str) -> bytes:
    """The contents of the block ``handle`` (an encoded BlockHandle) names, its checksum checked."""
    offset, at = _varint(handle, 0)
    size, _ = _varint(handle, at)
    end = offset + size
    if end + _TRAILER > len(index) - _FOOTER:
        raise DamagedIndex(f"its {what} block at {offset:,} ({size:,} bytes) runs past the end of the file")
    kind = index[end]
    (stored,) = struct.unpack_from("<I", index, end + 1)
    if crc32c(index[offset : end + 1]) != unmask(stored):
        raise DamagedIndex(f"the checksum of its {what} block at {offset:,} does not match")
    if kind == _SNAPPY:
        raise CompressedIndex(f"its {what} block at {offset:,} is snappy-compressed")
    if kind != _NO_COMPRESSION:
        raise DamagedIndex(f"its {what} block at {offset:,} has unknown compression type {kind}")
    return index[offset:end]


def _entries(block: bytes, what: str) -> Iterator[tuple[bytes, bytes]]:
    """The ``(key, value)`` entries of a block (keys share prefixes with the one before)."""
    if len(block) < 4:
        raise DamagedIndex(f"its {what} block is too short to be one")
    (restarts,) = struct.unpack_from("<I", block, len(block) - 4)
    limit = len(block) - 4 * (restarts + 1)
    if limit < 0:
        raise DamagedIndex(f"its {what} block's restart array is longer than the block")
    at, key = 0, b""
    while at < limit:
        shared, at = _varint(block, at)
        unshared, at = _varint(block, at)
        length, at = _varint(block, at)
        if shared > len(key) or at + unshared + length > limit:
            raise DamagedIndex(f"an entry of its {what} block runs past the block's end")
        key = key[:shared] + block[at : at + unshared]
        at += unshared
        yield key, block[at : at + length]
        at += length


def _read_entries(index: bytes) -> Iterator[tuple[bytes, bytes]]:
    """Every ``(key, value)`` of the table ``index`` holds, in the index block's order."""
    if len(index) < _FOOTER:
        raise DamagedIndex(f"it is {len(index):,} bytes, shorter than a table's {_FOOTER}-byte footer")
    (magic,) = struct.unpack_from("<Q", index, len(index) - 8)
    if magic != _MAGIC:
        raise DamagedIndex("it does not end in a table's magic number (cut short, or not an index)")
    footer = index[len(index) - _FOOTER :]
    _, at = _varint(footer, 0)  # the metaindex handle: TensorFlow's bundles keep nothing there
    _, at = _varint(footer, at)
    for _, handle in _entries(_block(index, footer[at:], "index"), "index"):
        yield from _entries(_block(index, handle, "data"), "data")


class Entry(NamedTuple):
    """Where the index places one tensor's bytes (a ``BundleEntryProto``'s fields)."""

    shard: int
    offset: int
    size: int
    crc32c: int  # masked, as TensorFlow stores it
    string: bool  # a string tensor, whose checksum also covers its lengths
    sliced: bool  # a partitioned variable's whole entry (its slices are entries of their own)


class BundleIndex(NamedTuple):
    """What a checkpoint's index holds: its data files' count, and each key's entry."""

    num_shards: int
    entries: dict[bytes, Entry]

    def needs(self) -> dict[int, int]:
        """How many bytes each data file must hold: the furthest end of a tensor in it."""
        needs: dict[int, int] = {}
        for entry in self.entries.values():
            needs[entry.shard] = max(needs.get(entry.shard, 0), entry.offset + entry.size)
        return needs


def _fields(message: bytes, what: str) -> Iterator[tuple[int, int | bytes]]:
    """The ``(field number, value)`` pairs of a serialized protocol buffer message (its wire format).

    A varint or fixed field's value is an int, a length-delimited one's its bytes (TensorFlow's
    generated ``tensor_bundle_pb2`` is not imported here: the one TensorFlow import stays lazy in
    ``_import``; ``tests/_tf/test_checkpoint_index.py`` checks this against it).
    """
    at = 0
    while at < len(message):
        key, at = _varint(message, at)
        number, wire = key >> 3, key & 7
        if wire == 0:
            value, at = _varint(message, at)
            yield number, value
        elif wire in (1, 5):  # fixed64, fixed32
            width = 8 if wire == 1 else 4
            if at + width > len(message):
                raise DamagedIndex(f"its entry for {what} ends inside a field")
            yield number, int.from_bytes(message[at : at + width], "little")
            at += width
        elif wire == 2:
            length, at = _varint(message, at)
            if at + length > len(message):
                raise DamagedIndex(f"its entry for {what} ends inside a field")
            yield number, message[at : at + length]
            at += length
        else:
            raise DamagedIndex(f"its entry for {what} is not a TensorBundle entry (wire type {wire})")


def _signed(value: int | bytes, what: str) -> int:
    if not isinstance(value, int):
        raise DamagedIndex(f"its entry for {what} is not a TensorBundle entry")
    return value - (1 << 64) if value >= 1 << 63 else value  # int32/int64 fields are two's complement


# Field numbers of tensorflow/core/protobuf/tensor_bundle.proto, and DataType's DT_STRING.
_HEADER_NUM_SHARDS, _HEADER_ENDIANNESS = 1, 2
_ENTRY_DTYPE, _ENTRY_SHARD, _ENTRY_OFFSET, _ENTRY_SIZE, _ENTRY_CRC, _ENTRY_SLICES = 1, 3, 4, 5, 6, 7
_DT_STRING, _LITTLE = 7, 0


def _entry(value: bytes, what: str) -> Entry:
    found: dict[int, int] = {}
    slices = 0
    for number, field in _fields(value, what):
        if number == _ENTRY_SLICES:
            slices += 1
        elif number in (_ENTRY_DTYPE, _ENTRY_SHARD, _ENTRY_OFFSET, _ENTRY_SIZE, _ENTRY_CRC):
            found[number] = _signed(field, what)
    entry = Entry(
        found.get(_ENTRY_SHARD, 0),
        found.get(_ENTRY_OFFSET, 0),
        found.get(_ENTRY_SIZE, 0),
        found.get(_ENTRY_CRC, 0),
        found.get(_ENTRY_DTYPE, 0) == _DT_STRING,
        slices > 0,
    )
    if min(entry.shard, entry.offset, entry.size) < 0:
        raise DamagedIndex(f"its entry for {what} has a negative place")
    return entry


def parse_index(index: bytes) -> BundleIndex:
    """The header and entries of the index file's bytes ``index``.

    Raises:
        DamagedIndex: ``index`` is not a whole TensorBundle index (the message says where).
        CompressedIndex: a block is compressed.
    """
    shards: int | None = None
    entries: dict[bytes, Entry] = {}
    for key, value in _read_entries(index):
        what = repr(key.decode("utf-8", "replace")) if key else "the header"
        if key != b"":
            entries[key] = _entry(value, what)
            continue
        header = {
            number: _signed(field, what) for number, field in _fields(value, what) if number <= _HEADER_ENDIANNESS
        }
        shards = header.get(_HEADER_NUM_SHARDS, 0)
        if header.get(_HEADER_ENDIANNESS, _LITTLE) != _LITTLE:
            raise DamagedIndex("its header says big-endian, which this machine cannot read")
    if shards is None or shards < 1:
        raise DamagedIndex("it has no TensorBundle header (num_shards)")
    beyond = sorted(e.shard for e in entries.values() if e.shard >= shards)
    if beyond:
        raise DamagedIndex(f"it places tensors in data file {beyond[0]}, beyond its {shards} data file(s)")
    return BundleIndex(shards, entries)


def data_file(prefix: str, shard: int, num_shards: int) -> str:
    """The name of data file ``shard`` of ``num_shards`` of checkpoint ``prefix``."""
    return f"{prefix}.data-{shard:05d}-of-{num_shards:05d}"


def index_problem(prefix: str) -> str | None:
    """What keeps checkpoint ``prefix`` from being restored, seen from its index: ``None`` when whole.

    Reads ``<prefix>.index`` (checksums included) and the sizes of the data files, no tensor.

    Raises:
        CompressedIndex: a block of the index is compressed; read the tensors instead.
    """
    base = os.path.basename(prefix)
    try:
        with open(prefix + ".index", "rb") as file:
            index = file.read()
    except FileNotFoundError:
        return f"its index {base}.index is missing"
    try:
        bundle = parse_index(index)
    except DamagedIndex as damage:
        return f"its index {base}.index ({len(index):,} bytes) is damaged: {damage}"
    needs = bundle.needs()
    for shard in range(bundle.num_shards):
        path = data_file(prefix, shard, bundle.num_shards)
        name = os.path.basename(path)
        try:
            size = os.path.getsize(path)
        except FileNotFoundError:
            return f"its data file {name} is missing"
        need = needs.get(shard, 0)
        if size < need:
            return (
                f"its data file {name} is {size:,} bytes, shorter than the {need:,} bytes its index "
                f"{base}.index places in it (cut short)"
            )
    return None
