//go:build !synctests

package session

// kgoMutexesDurable tells whether franz-go was built with its
// channel-based mutexes (build tag synctests), which a synctest bubble
// sees as durably blocking (kafkaTestThroughRebalances).
const kgoMutexesDurable = false
