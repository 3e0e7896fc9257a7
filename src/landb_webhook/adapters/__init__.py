"""The only code that knows openstacksdk and the kubernetes client: implementations of landb_webhook.backends.

Import the modules themselves (``adapters.kubernetes``, ``adapters.openstack``, ...): this package
imports nothing, so that light users such as the label-selector parser do not load both client libraries.
"""
