"""Game engines the scripted yardstick players play with (connect four and tictactoe bitboards, negamax
search, a tictactoe solver). Pure game logic: the `Policy` wrappers that make them players are in
`pzasync.learners.scripted`."""
