// A fixture: the lower layer reaching up, which the check must reject.
#include "ddprun/high/high.hpp"
