package limits

import "sync"

// Locks serialize, per limit, the check of a new instance and its record,
// so that two requests at once never both take a limit's last place. A
// lock is forgotten once nobody holds or waits for it: the keys are
// organizations and plans, as many as the platform has.
type Locks struct {
	mu    sync.Mutex
	locks map[string]*keyLock
}

type keyLock struct {
	sync.Mutex
	users int // holding or waiting
}

// Lock takes the lock of key, and returns what releases it.
func (k *Locks) Lock(key string) (unlock func()) {
	k.mu.Lock()
	if k.locks == nil {
		k.locks = map[string]*keyLock{}
	}
	l, ok := k.locks[key]
	if !ok {
		l = &keyLock{}
		k.locks[key] = l
	}
	l.users++
	k.mu.Unlock()
	l.Lock()
	return func() {
		l.Unlock()
		k.mu.Lock()
		defer k.mu.Unlock()
		if l.users--; l.users == 0 {
			delete(k.locks, key)
		}
	}
}

// Held is the number of keys with a lock held or waited for.
func (k *Locks) Held() int {
	k.mu.Lock()
	defer k.mu.Unlock()
	return len(k.locks)
}
