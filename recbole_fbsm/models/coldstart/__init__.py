"""Neural item cold-start models on a warm BPR-MF backbone: DropoutNet, Heater, ALDI."""
