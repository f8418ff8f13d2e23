"""Settings: their checks before torch is imported, RecBole's Config with the plugin's property layers, model lookup."""
