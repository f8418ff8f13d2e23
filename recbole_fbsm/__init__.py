"""recbole-fbsm: item cold-start recommendation (FBSM, UFSM, CoSim) as a RecBole plugin."""
