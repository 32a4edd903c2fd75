"""Model providers behind the `LlmProvider` protocol (see `base`).

Heavy SDKs (`anthropic`, `boto3`) are imported only when a provider is first used, never
at package import: editors wait on `initialize` and `session/new`.
"""
