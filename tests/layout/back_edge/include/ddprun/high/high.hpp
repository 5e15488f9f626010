// A fixture: the upper layer.
#pragma once
