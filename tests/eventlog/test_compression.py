"""The log's streams and the snapshot bucket are S2-compressed; replay reads the same entries back."""

from __future__ import annotations

import dataclasses

from nats.js.api import StoreCompression

from eventlog import codec
from eventlog import events as ev
from eventlog.jetstream import JetStreamLog, connect
from eventlog.store import InboxItem


async def test_new_streams_are_compressed_and_read_back_exactly(jslog: JetStreamLog) -> None:
    for stream in (jslog.names.log_stream, jslog.names.inbox_stream):
        assert (await jslog.js.stream_info(stream)).config.compression == StoreCompression.S2
    seqr = jslog.sequencer("L")
    events = [ev.ClusterRegistered(cluster=f"c{i}", labels={"zone": "z" * 200}) for i in range(50)]
    written = await seqr.append_inputs([InboxItem(inbox_seq=None, event=e) for e in events], at_ms=1)
    read = [e async for chunk in jslog.reader.read() for e in chunk]
    assert [codec.encode(e) for e in read] == [codec.encode(e) for e in written]


async def test_a_stream_created_uncompressed_is_switched_to_s2(jslog: JetStreamLog, nats_url: str) -> None:
    info = await jslog.js.stream_info(jslog.names.log_stream)
    await jslog.js.update_stream(dataclasses.replace(info.config, compression=StoreCompression.NONE))
    again = await connect(nats_url, root=jslog.names.root)
    try:
        assert (await again.js.stream_info(jslog.names.log_stream)).config.compression == StoreCompression.S2
    finally:
        await again.close()


async def test_the_snapshot_bucket_is_compressed(jslog: JetStreamLog) -> None:
    await jslog.snapshots.save(7, b"state" * 1000)
    info = await jslog.js.stream_info(f"OBJ_{jslog.names.snapshot_bucket}")
    assert info.config.compression == StoreCompression.S2
    assert await jslog.snapshots.latest() == (7, b"state" * 1000)
