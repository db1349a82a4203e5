"""Files stabcli writes: the output plan, atomic writes and temporary names, the resource guard."""
