"""The ACP bridge: JSON-RPC over stdio on one side, `AgentCore`/`Session` on the other."""
