"""`gradstream.utils`."""
