// Package display formats amounts for people: seconds as h:mm:ss, other
// units with thousands separators and their unit name. The CLI (internal/
// admincli) and the web console (internal/console) share it so that both
// show the same figures the same way. It imports nothing of the project.
package display
