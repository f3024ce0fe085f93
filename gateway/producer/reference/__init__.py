"""The reference route of the producer: store write, envelope, write window, rollback, pending marks."""
