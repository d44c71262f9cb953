# A code action as a model would write it: which city is warmer, Pittsburgh or Beijing?
temps = {}
for city in ["Pittsburgh", "Beijing"]:
    w = get_weather(city)
    t = w["temperature"]
    if w["unit"] == "fahrenheit":
        t = convert_temperature(t, to="celsius")
    temps[city] = t
    print(f"{city}: {t:.1f} °C ({w['condition']})")

warmer = max(temps, key=temps.get)
f"{warmer} is warmer by {abs(temps['Pittsburgh'] - temps['Beijing']):.1f} °C"
