"""What pzasync makes of any AEC env, in one process: env specs, per-agent storage layouts, the AEC
transition rules (docs/transitions.md), the one stepping loop, and `rollout`. No processes, no shared memory."""
