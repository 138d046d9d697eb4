"""Integrations with other systems; each lives in its own module with its own optional extra.

- :mod:`torch_tgb.integrations.ray`: producer fleets on Ray (``pip install 'torch-tgb[ray]'``).

Nothing here is imported by the rest of the package, and importing this
package imports none of the integrations.
"""
