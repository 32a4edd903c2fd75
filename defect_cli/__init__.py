"""The `defect` command: the composition root above the ACP bridge, the transcript tool and
the headless runner.

Owns the process: argument parsing (`cli.py`), the settings, provider, store and MCP wiring
that make a core (`wiring.py`), the event loop of `defect acp` (`idle_loop.py`) and `defect
exec` (`headless.py`, `exec_output.py`). It is the one package that imports `defect_acp`,
`defect_transcript`, `defect_fakeapi` and the runtime behind the session door alike; nothing
imports it (docs/layers.md), so each of them stays what its name says.
"""
