"""What travels to the ranks for the rlhf_system suite: rank functions only."""
