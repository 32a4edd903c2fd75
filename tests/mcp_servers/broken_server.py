"""MCP servers that never work, for defect's tests (stdlib only, so they fail fast).

Run: `python tests/mcp_servers/broken_server.py MODE` where MODE is
- `exit`: complain on stderr and exit with status 1 at once (a missing module, a bad config);
- `garbage`: print lines that are not JSON-RPC on stdout, then exit with status 2;
- `silent`: read stdin but never answer (a server that hangs at start-up);
- `leak`: print secrets on stderr (a bearer header; then, last, `token=` and a GitHub token
  and the bare value of its `BROKEN_SECRET` variable) and exit with status 1.

With `BROKEN_PID_FILE=<path>` it first writes its pid there; with `BROKEN_WAIT_FOR=<path>` it
then waits until that file exists before it fails (a failure a test lets happen when it
chooses).
"""

from __future__ import annotations

import os
import sys
import time

LEAKED_TOKEN = "ghp_" + "LeakedByTheServer0123456789abcdef"
"""What `leak` prints as `token=…`: a GitHub token no configuration names."""


def main() -> None:
    if pid_file := os.environ.get("BROKEN_PID_FILE"):
        with open(pid_file, "w", encoding="utf-8") as f:
            f.write(str(os.getpid()))
    if wait_for := os.environ.get("BROKEN_WAIT_FOR"):
        while not os.path.exists(wait_for):
            time.sleep(0.02)
    mode = sys.argv[1] if len(sys.argv) > 1 else "exit"
    if mode == "exit":
        sys.stderr.write("broken_server: cannot load config: no such file: settings.toml\n")
        sys.exit(1)
    if mode == "leak":
        sys.stderr.write("retrying with Authorization: Bearer abcdef0123456789\n")
        secret = os.environ.get("BROKEN_SECRET", "")
        sys.stderr.write(f"auth failed: token={LEAKED_TOKEN}, account {secret}\n")
        sys.exit(1)
    if mode == "garbage":
        sys.stdout.write("Welcome to the server!\nthis is not json\n")
        sys.stdout.flush()
        time.sleep(0.2)
        sys.exit(2)
    while True:
        time.sleep(3600)


if __name__ == "__main__":
    main()
