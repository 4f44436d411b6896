"""Texts in two languages for the chunking tests: Chinese on seven topics, and English."""

# Fourteen sentences on seven topics (weather, football, cooking, shares,
# programming, travel, health), two each.
SEVEN_TOPICS = (
    "今天北京的天气很晴朗。明天可能会下小雨。"
    "昨晚的足球比赛非常精彩。主队在最后一分钟进球获胜。"
    "做红烧肉需要先把五花肉切块。然后用冰糖和酱油慢慢炖煮。"
    "上证指数今天上涨了两个百分点。银行股的表现尤其强劲。"
    "Python是一种流行的编程语言。它的语法简洁易读。"
    "杭州的西湖风景十分优美。每年春天都有很多游客前来。"
    "医生建议每天喝足够的水。适量运动有助于身体健康。"
)
ENGLISH = (
    "The Normans gave their name to Normandy, a region in France. They descended from Norse raiders. "
    "Their identity emerged in the first half of the 10th century. The duchy was founded in 911. "
    "Rollo swore fealty to King Charles III. The Normans adopted the Romance language of the land. "
    "They were famed for their martial spirit and their piety. Norman architecture spread across Europe. "
    "Photosynthesis turns light into chemical energy. Plants store it as sugar. "
    "Elasticsearch stores documents in shards. A replica is a copy of a shard on another node."
)
