"""``nsq-trace watch``: capture files as they appear (``stream``, Structured Streaming), each micro-batch decoding
only its new files with the connections carried (``increments``) and ordering only the open messages' lifecycles
(``lifecycle_increments``)."""
