"""The paper's models as RecBole recommenders: FBSM, UFSM and CoSim."""
