"""miles's session server (radixark/miles 31f1ca961, miles/rollout/session/): a process of its own
between the rollout and the router that keeps each agentic session's records. slime has none; the
demo job carries it for the fault `rollout_session_server_blocked` (miles PR#1602), at the place
miles has it once the job is laid out as miles (`launch.miles_job`)."""
