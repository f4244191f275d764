"""Loading generators and reward models: hub ids, local folders, GGUF conversion, the named models
(`loading`), and the safe cache they are prepared into once (`cache`)."""
