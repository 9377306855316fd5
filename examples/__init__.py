"""Small runtimes built on hal, each runnable and tested: `examples.decode` is a GPT-style decode loop."""
