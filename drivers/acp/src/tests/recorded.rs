//! The driver on output recorded from the real agents (`testdata/<agent>/<scenario>.jsonl`:
//! `> ` lines went to the agent, `< ` lines came from it).
