"""Training side: encoder planning, lazy pixel fetch, encoding, embedding redistribution, trainer."""
