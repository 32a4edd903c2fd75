"""Relay for scripts/bench_turn.py: run a command, stamp each text-delta mark off its stdout.

`python scripts/stamp_relay.py STAMPS COMMAND...` runs COMMAND with its stdin and stdout
passed through, and appends `mark time` to the file STAMPS for every `<dNNNNNN>` mark, with
the time (`time.perf_counter`, CLOCK_MONOTONIC, shared by every process) at which the bytes
carrying it could be read off the command's stdout. The bench's client validates every
message against the ACP schema, which is slower than a fast stream: stamped there, the
figure would be the client's backlog; stamped here, in a process that does nothing else, it
is the agent's latency. Not a benchmark itself (`bench_all` runs `bench_*.py` only).
"""

from __future__ import annotations

import os
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


def main() -> int:
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
    source = proc.stdout.fileno()
    with open(stamps_path, "a", encoding="ascii") as stamps:
        while data := os.read(source, 1 << 16):
            now = time.perf_counter()
            if b"<d" in data:
                stamps.writelines(f"{int(m.group(1))} {now}\n" for m in MARK.finditer(data))
            _write_all(1, data)
    return proc.wait()


if __name__ == "__main__":
    raise SystemExit(main())
