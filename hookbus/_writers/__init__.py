"""The writer kit: background writers behind bounded queues, their deadlines, and one writer per output file."""
