"""Hidden suite of rlhf_system (never shipped to students)."""
