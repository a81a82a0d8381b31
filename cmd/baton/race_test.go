//go:build race

package main

// raceEnabled: this test binary was built with -race, and so are the Baton
// processes its tests start (batonBinary).
const raceEnabled = true
