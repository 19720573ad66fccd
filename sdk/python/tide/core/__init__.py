"""Parts shared by tide's client packages, as azure.core is for Azure's."""
