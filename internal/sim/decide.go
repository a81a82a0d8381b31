package sim

import (
	"errors"
	"fmt"
	"strings"
)

// Decision is a [sim:decide=ACTION] directive (§12): the simulated
// model's decision in an adaptive run.
type Decision struct {
	// Action is continue, synthesize, request_input or adjust_plan.
	Action string
	// Question is request_input's question.
	Question string
	// Add is the title of the task adjust_plan:+TITLE adds; Remove the id
	// adjust_plan:-TASK_ID removes.
	Add, Remove string
}

// Decide returns the decision of the first well-formed [sim:decide=…]
// directive in text.
func Decide(text string) (Decision, bool) {
	for _, m := range directive.FindAllStringSubmatch(text, -1) {
		if m[1] != "decide" {
			continue
		}
		if d, err := parseDecide(m[2]); err == nil {
			return d, true
		}
	}
	return Decision{}, false
}

func parseDecide(value string) (Decision, error) {
	action, arg, hasArg := strings.Cut(value, ":")
	switch {
	case (action == "continue" || action == "synthesize") && !hasArg:
		return Decision{Action: action}, nil
	case action == "request_input" && strings.TrimSpace(arg) != "":
		return Decision{Action: action, Question: arg}, nil
	case action == "adjust_plan" && strings.HasPrefix(arg, "+") && strings.TrimSpace(arg[1:]) != "":
		return Decision{Action: action, Add: strings.TrimSpace(arg[1:])}, nil
	case action == "adjust_plan" && strings.HasPrefix(arg, "-") && strings.TrimSpace(arg[1:]) != "":
		return Decision{Action: action, Remove: strings.TrimSpace(arg[1:])}, nil
	}
	return Decision{}, errors.New(`want continue, synthesize, request_input:QUESTION, adjust_plan:+TITLE or adjust_plan:-TASK_ID`)
}

// checkDecide is Check's test of a decide directive's value.
func checkDecide(value string) error {
	if _, err := parseDecide(value); err != nil {
		return fmt.Errorf("%q: %w", value, err)
	}
	return nil
}
