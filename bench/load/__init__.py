"""What is sent to a server: streamed requests (loadgen), every other HTTP call (http_client, /metrics scrape included) and prompt naming."""
