"""The harness recorded alongside the transcripts of the real nsqd (fixtures/transcripts*.jsonl), unchanged:
`replay.replay_one` is the reading of a transcript that produced 266/266 against nsqd itself."""
