"""One vLLM server: its exact argv and environment (launch, vllm_argv), the process and its guard (server, guard), and the GPU bandwidth measurement a manifest records."""
