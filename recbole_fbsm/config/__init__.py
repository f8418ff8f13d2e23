"""Settings: the strict checks run before torch is imported (``settings``), RecBole's Config with the
plugin's property layers (``cold_start_config``), the command line's --key=value parsing (``cli``), model lookup
(``registry``)."""
