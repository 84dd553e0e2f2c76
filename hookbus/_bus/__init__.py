"""The bus and its parts: who is subscribed, dispatch, stops, the run scope, the keys and the checkpoint barrier."""
