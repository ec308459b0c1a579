"""The virtual-time fleet simulator (``kvroute sim``): replays a trace through the routing
policies over emulated engines and reports goodput, SLO attainment and cost
(``docs/sim.md``)."""
