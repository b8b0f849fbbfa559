package locality

// View is how a Balancer routes its current set, for tests, dashboards and
// the simulator.
type View struct {
	// Levels are the priority levels with backends, in priority order.
	Levels []Level
}

// Level is one priority level in a View.
type Level struct {
	Priority int
	// Healthy and Total count the level's backends.
	Healthy, Total int
	// Load is the share of this caller's requests sent to the level.
	Load float64
	// Panic reports that the level's requests go to all of its backends,
	// healthy or not (see Config.PanicPercent).
	Panic bool
	// ZoneAware reports that zone-aware routing applies in the level.
	ZoneAware bool
	// Zones are the level's zones, by name.
	Zones []Zone
}

// Zone is one zone of a level in a View.
type Zone struct {
	Zone string
	// Healthy and Total count the zone's backends; Handed is how many its
	// picker has: the healthy ones, or all in panic.
	Healthy, Total, Handed int
	// Share is the share of the level's requests from this caller sent to
	// the zone.
	Share float64
}
