"""Framework adapters: each turns a framework's model into NNAdapter models through the public API."""
