"""The check of a checkpoint from its index alone (hookbus/_tf/_checkpoint_index.py, issue 39 item 3).

Real checkpoints, written by TensorFlow: the TF1 ``Saver`` (one data file, and several with
``sharded=True`` over two CPU devices, a partitioned variable among them) and ``tf.train.Checkpoint``
(one data file, and several with a ``MaxShardSizePolicy``). On each, the parse agrees with
TensorFlow's own reader and writer; then each kind of damage is made on disk and named; and the
check is shown to read no tensor: it passes a checkpoint whose tensors' bytes are garbage, which
TensorFlow's restore then refuses.
"""

from __future__ import annotations

import os
import struct
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

tf = pytest.importorskip("tensorflow")

tensor_bundle_pb2 = pytest.importorskip("tensorflow.core.protobuf.tensor_bundle_pb2")

from hookbus._tf._checkpoint_index import (  # noqa: E402 - after the importorskip
    CompressedIndex,
    Entry,
    _read_entries,
    _varint,
    crc32c,
    data_file,
    index_problem,
    parse_index,
    unmask,
)
from hookbus._tf._checkpoint_tf1 import TENSORFLOW, read_problem  # noqa: E402

v1 = tf.compat.v1


def tf1_checkpoint(directory: Path, *, sharded: bool) -> str:
    """A TF1 Saver's checkpoint: three variables, a partitioned one, and (sharded) one on a second CPU."""
    with tf.Graph().as_default():
        for i in range(3):
            v1.get_variable(f"v{i}", initializer=tf.random.uniform((100 + i,)))
        with tf.device("/cpu:1" if sharded else "/cpu:0"):
            v1.get_variable("w", initializer=tf.ones((50,)))
        partitioner = v1.fixed_size_partitioner(2)
        v1.get_variable("part", shape=(40, 4), partitioner=partitioner, initializer=v1.random_uniform_initializer())
        v1.get_variable("count", initializer=tf.constant(7, tf.int64))
        saver = v1.train.Saver(sharded=sharded)
        with v1.Session(config=v1.ConfigProto(device_count={"CPU": 2})) as session:
            session.run(v1.global_variables_initializer())
            return str(saver.save(session, str(directory / "model.ckpt"), global_step=3, write_state=False))


def tf2_checkpoint(directory: Path, *, sharded: bool) -> str:
    """A ``tf.train.Checkpoint``'s: a module with float, int and string variables (and its object graph)."""
    module = tf.Module()
    module.a = tf.Variable(np.arange(1000, dtype="float32"))
    module.b = tf.Variable(tf.random.uniform((30, 30)))
    module.n = tf.Variable(5, dtype=tf.int64)
    module.s = tf.Variable("a string value")
    options = None
    if sharded:
        policy = tf.train.experimental.MaxShardSizePolicy(max_shard_size=2000)
        options = tf.train.CheckpointOptions(experimental_sharding_callback=policy)
    return str(tf.train.Checkpoint(model=module).write(str(directory / "ckpt-3"), options=options))


MAKERS: dict[str, Callable[[Path], str]] = {
    "tf1": lambda d: tf1_checkpoint(d, sharded=False),
    "tf1-sharded": lambda d: tf1_checkpoint(d, sharded=True),
    "tf2": lambda d: tf2_checkpoint(d, sharded=False),
    "tf2-sharded": lambda d: tf2_checkpoint(d, sharded=True),
}


@pytest.fixture(params=sorted(MAKERS))
def checkpoint(request: pytest.FixtureRequest, tmp_path: Path) -> str:
    return MAKERS[request.param](tmp_path)


def _index(prefix: str) -> bytes:
    return Path(prefix + ".index").read_bytes()


def test_crc32c_is_castagnolis() -> None:
    assert crc32c(b"123456789") == 0xE3069283  # the check value of CRC-32C
    assert crc32c(b"") == 0


def test_the_parse_agrees_with_tensorflow_on_good_checkpoints(checkpoint: str) -> None:
    bundle = parse_index(_index(checkpoint))
    # Each entry as TensorFlow's own generated protocol buffer classes read it.
    protos = dict(_read_entries(_index(checkpoint)))
    header = tensor_bundle_pb2.BundleHeaderProto.FromString(protos.pop(b""))
    assert bundle.num_shards == header.num_shards
    assert set(bundle.entries) == set(protos)
    for key, value in protos.items():
        proto = tensor_bundle_pb2.BundleEntryProto.FromString(value)
        string = proto.dtype == tf.string.as_datatype_enum
        expected = Entry(proto.shard_id, proto.offset, proto.size, proto.crc32c, string, len(proto.slices) > 0)
        assert bundle.entries[key] == expected, key
    files = sorted(p for p in os.listdir(os.path.dirname(checkpoint)) if ".data-" in p)
    assert files == [os.path.basename(data_file(checkpoint, i, bundle.num_shards)) for i in range(bundle.num_shards)]
    # TensorFlow's reader lists every tensor by name; the parse has those (slices are keys of their own).
    names = set(tf.train.load_checkpoint(checkpoint).get_variable_to_shape_map())
    assert {k.decode() for k in bundle.entries if not k.startswith(b"\x00")} == names
    # The writer's layout: each data file is exactly as long as the furthest tensor the index places in it.
    needs = bundle.needs()
    for shard in range(bundle.num_shards):
        assert os.path.getsize(data_file(checkpoint, shard, bundle.num_shards)) == needs.get(shard, 0)
    # Each numeric tensor's bytes have the checksum TensorFlow's writer put in the index beside them.
    checked = 0
    for entry in bundle.entries.values():
        if entry.string or entry.sliced or entry.size == 0:
            continue
        with open(data_file(checkpoint, entry.shard, bundle.num_shards), "rb") as f:
            f.seek(entry.offset)
            assert crc32c(f.read(entry.size)) == unmask(entry.crc32c)
        checked += 1
    assert checked >= 3  # every float and int variable
    assert index_problem(checkpoint) is None
    assert TENSORFLOW.problem(checkpoint) is None
    assert read_problem(checkpoint) is None  # TensorFlow reads every tensor back: whole


def test_several_data_files_are_made_and_parsed(tmp_path: Path) -> None:
    assert parse_index(_index(tf1_checkpoint(tmp_path, sharded=True))).num_shards == 2
    assert parse_index(_index(tf2_checkpoint(tmp_path, sharded=True))).num_shards >= 3


def test_a_truncated_data_file_is_named_with_its_size_and_the_size_needed(checkpoint: str) -> None:
    bundle = parse_index(_index(checkpoint))
    shard = bundle.num_shards - 1
    path = data_file(checkpoint, shard, bundle.num_shards)
    size = os.path.getsize(path)
    with open(path, "r+b") as f:
        f.truncate(size - 1)
    problem = index_problem(checkpoint)
    assert problem == (
        f"its data file {os.path.basename(path)} is {size - 1:,} bytes, shorter than the {size:,} bytes its "
        f"index {os.path.basename(checkpoint)}.index places in it (cut short)"
    )
    assert read_problem(checkpoint) is not None  # TensorFlow's reader fails on it too


def test_a_missing_data_file_is_named(checkpoint: str) -> None:
    bundle = parse_index(_index(checkpoint))
    path = data_file(checkpoint, bundle.num_shards - 1, bundle.num_shards)
    os.remove(path)
    assert index_problem(checkpoint) == f"its data file {os.path.basename(path)} is missing"
    assert read_problem(checkpoint) is not None


def test_a_missing_index_is_named(checkpoint: str) -> None:
    os.remove(checkpoint + ".index")
    assert index_problem(checkpoint) == f"its index {os.path.basename(checkpoint)}.index is missing"


@pytest.mark.parametrize("keep", [0, 10, 47, -1])
def test_a_truncated_index_is_damaged_and_tensorflow_agrees(checkpoint: str, keep: int) -> None:
    index = _index(checkpoint)
    cut = index[:keep] if keep >= 0 else index[: len(index) + keep]
    Path(checkpoint + ".index").write_bytes(cut)
    problem = index_problem(checkpoint)
    assert problem is not None
    assert problem.startswith(f"its index {os.path.basename(checkpoint)}.index ({len(cut):,} bytes) is damaged: ")
    assert read_problem(checkpoint) is not None


def test_a_garbled_byte_anywhere_in_the_index_is_found_and_tensorflow_agrees(checkpoint: str) -> None:
    index = _index(checkpoint)
    # Every position: a block's content or trailer fails its checksum, the footer its index handle or
    # magic. What nobody reads, TensorFlow's reader neither: the footer's padding, and the metaindex
    # block and its handle (LevelDB's filters; a TensorBundle has none, and TensorFlow's table never
    # opens it). XOR 0x5A keeps bit 7, so a varint keeps its length.
    footer = len(index) - 48
    meta_offset, meta_size, meta_handle, handles = _footer(index)
    unread = {
        *range(footer, footer + meta_handle),
        *range(footer + handles, len(index) - 8),
        *range(meta_offset, meta_offset + meta_size + 5),
    }
    for at in range(len(index)):
        garbled = bytearray(index)
        garbled[at] ^= 0x5A
        Path(checkpoint + ".index").write_bytes(bytes(garbled))
        problem = index_problem(checkpoint)
        if at in unread:
            assert problem is None, f"byte {at} of {len(index)}: {problem}"
            assert read_problem(checkpoint) is None, f"byte {at}: TensorFlow's reader does not read it either"
            continue
        assert problem is not None, f"byte {at} of {len(index)}"
        assert "is damaged" in problem, problem
        if at % 37 == 0:  # TensorFlow's reader refuses it too (a sample: each read costs a load)
            assert read_problem(checkpoint) is not None, f"byte {at}"


def _footer(index: bytes) -> tuple[int, int, int, int]:
    """The metaindex block's offset and size, and how many bytes its handle and both handles take."""
    start = at = len(index) - 48
    values = []
    for _ in range(4):
        value = shift = 0
        while True:
            byte = index[at]
            at += 1
            value |= (byte & 0x7F) << shift
            shift += 7
            if not byte & 0x80:
                break
        values.append(value)
        if len(values) == 2:
            meta_handle = at - start
    return values[0], values[1], meta_handle, at - start


def test_a_compressed_block_is_left_to_tensorflows_reader(tmp_path: Path) -> None:
    """TensorFlow writes no compressed block; one (snappy, type 1) is not read here but by TensorFlow."""
    prefix = tf2_checkpoint(tmp_path, sharded=False)
    index = bytearray(_index(prefix))
    # The first data block starts at 0; its trailer follows it. Mark it snappy, with a matching checksum.
    footer = len(index) - 48
    size = _index_block_first_handle_size(bytes(index), footer)
    index[size] = 1
    struct.pack_into("<I", index, size + 1, _mask(crc32c(bytes(index[: size + 1]))))
    Path(prefix + ".index").write_bytes(bytes(index))
    with pytest.raises(CompressedIndex, match="snappy"):
        index_problem(prefix)
    problem = TENSORFLOW.problem(prefix)  # the store falls back on reading it with TensorFlow
    assert problem is not None
    assert problem.startswith("reading it fails with ")


def _mask(crc: int) -> int:
    return ((((crc >> 15) | (crc << 17)) & 0xFFFFFFFF) + 0xA282EAD8) & 0xFFFFFFFF


def _index_block_first_handle_size(index: bytes, footer: int) -> int:
    """The size of the first data block (it starts at offset 0), from the index block's first handle."""

    def varint(at: int) -> tuple[int, int]:
        return _varint(index, at)

    _, at = varint(footer)
    _, at = varint(at)
    index_offset, at = varint(at)
    # The index block's first entry: shared (0), unshared, value length, key, then the handle.
    _, p = varint(index_offset)
    unshared, p = varint(p)
    _, p = varint(p)
    offset, p = varint(p + unshared)
    size, _ = varint(p)
    assert offset == 0
    return size


@settings(max_examples=8, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(seed=st.integers(0, 2**32 - 1), maker=st.sampled_from(sorted(MAKERS)))
def test_the_check_reads_no_tensor_garbage_of_the_same_length_passes_it_and_fails_the_restore(
    tmp_path_factory: pytest.TempPathFactory, seed: int, maker: str
) -> None:
    """Every tensor's bytes overwritten with garbage, the files' sizes kept: the check cannot tell
    (it read none of them), TensorFlow's reading every tensor back can (each one's checksum)."""
    prefix = MAKERS[maker](tmp_path_factory.mktemp("garbage"))
    bundle = parse_index(_index(prefix))
    rng = np.random.default_rng(seed)
    for shard in range(bundle.num_shards):
        path = data_file(prefix, shard, bundle.num_shards)
        size = os.path.getsize(path)
        garbage = rng.integers(0, 256, size, dtype=np.uint8).tobytes()
        Path(path).write_bytes(garbage)
    assert index_problem(prefix) is None
    assert TENSORFLOW.problem(prefix) is None
    problem = read_problem(prefix)
    assert problem is not None
    assert "DataLossError" in problem or "Checksum" in problem or "checksum" in problem, problem


def test_a_checkpoint_tensorflow_reads_whole_is_kept_whatever_the_index_check_says(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    """A disagreement of the index check with TensorFlow (a layout it does not know) never sets a
    restorable checkpoint aside: where the check finds something, TensorFlow's whole read decides.
    No real checkpoint makes the two disagree (the tests above), so the check's word is forced."""
    import hookbus._tf._checkpoint_tf1 as store_module

    prefix = tf1_checkpoint(tmp_path, sharded=False)
    monkeypatch.setattr(store_module, "index_problem", lambda p: "its index is damaged (forced)")
    with caplog.at_level("WARNING", logger="hookbus"):
        assert TENSORFLOW.problem(prefix) is None
    assert "TensorFlow reads it whole; it is kept" in caplog.text
    data = sorted(Path(tmp_path).glob("*.data-*"))[0]
    data.write_bytes(data.read_bytes()[:-8])  # now really damaged: TensorFlow's read fails too
    assert TENSORFLOW.problem(prefix) == "its index is damaged (forced)"
