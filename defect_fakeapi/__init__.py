"""The strict fake Anthropic / Bedrock API server (`defect fake-api`)."""
