package auth

// Patterns come from the rooms and pub claims. A pattern matches a name
// exactly, or, when it ends with "*", matches every name that starts with
// the text before the star and is longer than it: "team-*" matches
// "team-red" but not "team"; "*" alone matches any non-empty name. A star
// anywhere else is an ordinary character. An empty name matches nothing.
//
// Matching is a linear scan without allocation: the lists are the few
// entries of one token.

// Match reports whether name matches one of patterns.
func Match(patterns []string, name string) bool {
	if name == "" {
		return false
	}
	for _, p := range patterns {
		if matchOne(p, name) {
			return true
		}
	}
	return false
}

func matchOne(p, name string) bool {
	if n := len(p) - 1; n >= 0 && p[n] == '*' {
		return len(name) > n && name[:n] == p[:n]
	}
	return p == name
}

// AllowRoom reports whether the token lets its user join room itself.
// A nil c allows nothing.
func AllowRoom(c *Claims, room string) bool {
	return c != nil && Match(c.Rooms, room)
}

// AllowSend reports whether the token lets its user send event upstream:
// without a send claim any event may be sent; with one (even an empty
// list) the event must match one of its patterns.
func AllowSend(c *Claims, event string) bool {
	return c == nil || c.Send == nil || Match(c.Send, event)
}

// Publish target types, as written in pub patterns ("user:ID", "room:ID").
const (
	TargetUser = "user"
	TargetRoom = "room"
)

// AllowPublish reports whether the token lets its user publish to the
// target written targetType + ":" + id, matched against the pub patterns
// ("user:*" allows any user, "room:team-*" the rooms starting with
// "team-"). Only the "user" and "room" types can be allowed, the id must be
// non-empty, and a nil c allows nothing.
func AllowPublish(c *Claims, targetType, id string) bool {
	if c == nil || id == "" || (targetType != TargetUser && targetType != TargetRoom) {
		return false
	}
	for _, p := range c.Pub {
		if matchTarget(p, targetType, id) {
			return true
		}
	}
	return false
}

// matchTarget is matchOne(p, typ+":"+id) without building the string.
func matchTarget(p, typ, id string) bool {
	full := len(typ) + 1 + len(id)
	if n := len(p) - 1; n >= 0 && p[n] == '*' {
		return full > n && hasPrefixJoined(typ, id, p[:n])
	}
	return len(p) == full && hasPrefixJoined(typ, id, p)
}

// hasPrefixJoined reports whether typ+":"+id starts with prefix.
func hasPrefixJoined(typ, id, prefix string) bool {
	if len(prefix) <= len(typ) {
		return typ[:len(prefix)] == prefix
	}
	if prefix[:len(typ)] != typ || prefix[len(typ)] != ':' {
		return false
	}
	rest := prefix[len(typ)+1:]
	return len(rest) <= len(id) && id[:len(rest)] == rest
}
