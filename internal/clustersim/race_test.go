//go:build race

package clustersim

const raceEnabled = true
