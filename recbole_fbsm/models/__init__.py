"""The plugin's RecBole recommenders: FBSM, UFSM, CoSim, ItemKNNCBF, Random, DropoutNet, Heater, ALDI, HybridBlend
and EASE (RecBole's, in float32 on the run's device); LightGCN and NGCF (RecBole's, with an adjacency matrix that
current scipy can build).

``recbole_fbsm.config.registry.PLUGIN_MODELS`` maps each name to its module (tests/models/test_model_contract.py holds
this list equal to it).
"""
