"""Relay for scripts/bench_turn.py: run a command, stamp each text-delta mark off its stdout.

`python scripts/stamp_relay.py STAMPS COMMAND...` runs COMMAND with its stdin and stdout
passed through, and writes `mark time` to the file STAMPS for every `<dNNNNNN>` mark, with
the time (`time.perf_counter`, CLOCK_MONOTONIC, shared by every process) at which the bytes
carrying it were read off the command's stdout.

The command's stdout is read continuously, whatever the client does: the reader only reads,
stamps and queues; a second thread forwards the queued bytes to our own stdout, at whatever
pace the client takes them. The bench's client validates every message against the ACP
schema, which is slower than a fast stream. Were the relay to forward before reading on, a
client that falls behind would stop it reading, the command's stdout pipe would fill, and the
command's writes would wait: that wait (the client's backlog) would be counted as the
command's latency. Read continuously, the figure is the command's own: from the fake API
sending a delta to the line carrying it being readable on the command's stdout. Stamps are
kept in memory and written once the command's stdout ends, so no file I/O sits in the
reader's loop. Not a benchmark itself (`bench_all` runs `bench_*.py` only).
"""

from __future__ import annotations

import os
import queue
import re
import subprocess
import sys
import threading
import time

MARK = re.compile(rb"<d(\d{6})>")


def _write_all(fd: int, data: bytes) -> None:
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def _forward(chunks: queue.SimpleQueue[bytes | None], fd: int) -> None:
    """Write the queued chunks to `fd`, in order, until the end marker (None)."""
    broken = False
    while (data := chunks.get()) is not None:
        if broken:
            continue  # keep draining: the reader must never wait on us
        try:
            _write_all(fd, data)
        except OSError:
            broken = True


def main() -> int:
    # The reader wakes on every chunk; a thread holding the GIL must not keep it waiting for
    # the default 5 ms switch interval (the other threads mostly sit in blocking I/O anyway).
    sys.setswitchinterval(0.0002)
    stamps_path, command = sys.argv[1], sys.argv[2:]
    proc = subprocess.Popen(command, stdin=subprocess.PIPE, stdout=subprocess.PIPE, bufsize=0)
    assert proc.stdin is not None and proc.stdout is not None
    agent_in = proc.stdin

    def forward_input() -> None:
        try:
            while chunk := os.read(0, 1 << 16):
                agent_in.write(chunk)
        except OSError:
            pass
        finally:
            agent_in.close()

    threading.Thread(target=forward_input, daemon=True).start()
    chunks: queue.SimpleQueue[bytes | None] = queue.SimpleQueue()
    forwarder = threading.Thread(target=_forward, args=(chunks, 1), daemon=True)
    forwarder.start()
    stamps: list[tuple[bytes, float]] = []
    source = proc.stdout.fileno()
    while data := os.read(source, 1 << 16):
        now = time.perf_counter()
        chunks.put(data)
        if b"<d" in data:
            stamps.extend((m.group(1), now) for m in MARK.finditer(data))
    chunks.put(None)
    forwarder.join()
    with open(stamps_path, "a", encoding="ascii") as out:
        out.writelines(f"{int(mark)} {at}\n" for mark, at in stamps)
    return proc.wait()


if __name__ == "__main__":
    raise SystemExit(main())
