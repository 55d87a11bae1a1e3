"""Serving a class: batched rounds (many sequences, one target pass), the fair engine gate, students'
rounds coalesced into batches, a test server, replicas behind nginx, and the load test."""
